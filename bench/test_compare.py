#!/usr/bin/env python3
"""Checks bench/compare.py on synthetic dsv4kv_bench and triton_bench JSON (no GPU needed).

Run: python3 bench/test_compare.py (exit status 0 when every check passes; also a CTest test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402

CEILING = 4000.0  # GB/s
EMPTY = 3.5       # µs


def ours_row(key, us, bytes_min, op=None, verify="ok", stride=0, copy_us=None):
    return {"key": key, "op": op or key.split()[0], "shape": key, "block_stride": stride, "bytes_min": bytes_min,
            "us": us, "stream_median_us": us, "same_bytes_copy_us": copy_us, "verify": verify, "error": ""}


def ours_json(rows):
    return {"info": {"copy_ceiling_GBps": CEILING, "empty_kernel_graph_us": EMPTY, "gpu": "synthetic",
                     "build_commit": "test", "layout": {"aligned_stride": 37440, "unaligned_stride": 37378}},
            "rows": rows}


def triton_row(key, us, variant="kernel", verify=None):
    r = {"key": key, "op": key.split()[0], "variant": variant, "cold_graph_us": us}
    if verify is not None:
        r["verify"] = verify
    return r


def us_for_fraction(bytes_min, frac):
    """The time at which bytes_min moves at frac x the ceiling."""
    return bytes_min / (frac * CEILING * 1e9) * 1e6


class CompareTest(unittest.TestCase):
    def run_build(self, rows, trows, have_triton=True):
        return compare.build(ours_json(rows), {"rows": trows, "info": {}}, have_triton)

    def test_big_row_copy_and_speedup(self):
        b = 64e6
        rows = [ours_row("gather a", us_for_fraction(b, 0.95), b), ours_row("gather b", us_for_fraction(b, 0.85), b)]
        trows = [triton_row("gather a", 100.0), triton_row("gather b", 100.0)]
        _, joined, met, total, ok = self.run_build(rows, trows)
        self.assertEqual(total, 4)
        self.assertEqual(met, 3)  # b misses 90% of copy
        self.assertFalse(ok)
        self.assertEqual([x["met"] for x in joined[1]["figures"]], [True, False])

    def test_fastest_variant_is_the_comparison(self):
        rows = [ours_row("op x", 10.0, 4e6)]
        trows = [triton_row("op x", 20.0, "wrapper"), triton_row("op x", 9.0, "kernel-only")]
        lines, joined, met, total, _ = self.run_build(rows, trows)
        self.assertEqual((met, total), (0, 1))  # 1 MB <= bytes < 8 MB: only the Triton figure
        self.assertEqual(joined[0]["triton_variant"], "kernel-only")
        self.assertIn("(kernel-only)", "\n".join(lines))

    def test_small_row_floor(self):
        rows = [ours_row("quantize 1", EMPTY + 0.9, 1200), ours_row("quantize 64", EMPTY + 1.1, 80000)]
        trows = [triton_row("quantize 1", 9.0), triton_row("quantize 64", 9.0)]
        _, joined, met, total, _ = self.run_build(rows, trows)
        self.assertEqual(total, 4)
        self.assertEqual(met, 3)
        self.assertEqual([x["met"] for x in joined[1]["figures"]], [True, False])

    def test_chain_speedups(self):
        rows = [ours_row("chain decode", 10.0, 2e6, op="chain"), ours_row("chain prefill", 30.0, 2e6, op="chain")]
        trows = [triton_row("chain decode", 21.0), triton_row("chain prefill", 110.0)]
        _, joined, met, total, _ = self.run_build(rows, trows)
        self.assertEqual((met, total), (1, 2))  # decode 2.1x >= 2; prefill 3.67x < 4
        self.assertIn("2.00", joined[0]["figures"][0]["figure"])
        self.assertIn("4.00", joined[1]["figures"][0]["figure"])

    def test_pdl_rows_join_the_chain_without_suffix(self):
        rows = [ours_row("chain decode", 11.0, 2e6, op="chain"), ours_row("chain decode pdl", 10.0, 2e6, op="chain")]
        rows[1]["pdl"] = True
        trows = [triton_row("chain decode", 21.0)]
        lines, joined, met, total, _ = self.run_build(rows, trows)
        self.assertEqual((met, total), (1, 2))  # 1.91x misses 2x; the pdl row's 2.1x meets it
        self.assertEqual([x["triton_us"] for x in joined], [21.0, 21.0])
        self.assertIn("2.00", joined[1]["figures"][0]["figure"])
        self.assertNotIn("No Triton time", "\n".join(lines))
        # without the flag the suffix is part of the key (no Triton row of that name)
        del rows[1]["pdl"]
        lines, joined, *_ = self.run_build(rows, trows)
        self.assertIsNone(joined[1]["triton_us"])
        self.assertIn("No Triton time for: chain decode pdl", "\n".join(lines))

    def test_profile_rows_within_three_percent_of_the_seed_row(self):
        seed, up, slow = "combine t=1", "combine t=1 semantics=vllm_v41", "mixed t=2 semantics=vllm_v4"
        rows = [ours_row(seed, 10.0, 2e6), ours_row(up, 10.29, 2e6), ours_row("mixed t=2", 10.0, 2e6),
                ours_row(slow, 10.4, 2e6), ours_row("global_topk t=3 semantics=vllm_v4", 5.0, 2e6)]
        trows = [triton_row(k, 20.0) for k in (seed, up, "mixed t=2", slow, "global_topk t=3 semantics=vllm_v4")]
        lines, joined, met, total, _ = self.run_build(rows, trows)
        self.assertEqual([len(x["figures"]) for x in joined], [1, 2, 1, 2, 2])
        self.assertEqual([x["met"] for x in joined[1]["figures"]], [True, True])  # 1.029x the seed's time
        self.assertEqual([x["met"] for x in joined[3]["figures"]], [True, False])  # 1.04x
        self.assertEqual(joined[4]["figures"][1], {"figure": "≤ 1.03× seed (no seed row)", "met": False})
        self.assertEqual((met, total), (6, 8))
        self.assertIn("mixed t=2 semantics=vllm_v4 (≤ 1.03× seed)", "\n".join(lines))

    def test_without_triton_no_speed_figures(self):
        b = 64e6
        _, _, met, total, ok = self.run_build([ours_row("gather a", us_for_fraction(b, 0.95), b)], [], False)
        self.assertEqual((met, total, ok), (1, 1, True))

    def test_missing_triton_row_is_not_met(self):
        lines, _, met, total, _ = self.run_build([ours_row("global_topk z", 5.0, 2e6)], [triton_row("other", 1.0)])
        self.assertEqual((met, total), (0, 1))
        self.assertIn("No Triton time for: global_topk z", "\n".join(lines))

    def test_mismatch_fails_even_when_figures_met(self):
        rows = [ours_row("gather a", 1.0, 2e6, verify="MISMATCH: out: first mismatch")]
        _, _, met, total, ok = self.run_build(rows, [triton_row("gather a", 5.0)])
        self.assertEqual((met, total), (1, 1))
        self.assertFalse(ok)

    def test_table_columns_and_last_line(self):
        lines, *_ = self.run_build([ours_row("gather a", 10.0, 2e6, stride=37378)], [triton_row("gather a", 20.0)])
        header = [c.strip() for c in lines[2].strip("|").split("|")]
        self.assertEqual(header, ["op", "shape", "our µs", "Triton µs", "speedup", "same-bytes copy µs", "% of copy",
                                  "empty-kernel floor µs", "met"])
        self.assertIn("stride=37378", lines[4])
        self.assertEqual(lines[-1], "Figures met: 1 of 1")

    def test_triton_byte_check_shown(self):
        rows = [ours_row("gather a", 10.0, 2e6), ours_row("gather b", 10.0, 2e6)]
        trows = [triton_row("gather a", 20.0, verify="MISMATCH: gather output 0"),
                 triton_row("gather b", 20.0, verify="not run (dsv4kv package not importable: x)")]
        lines, joined, *_ = self.run_build(rows, trows)
        text = "\n".join(lines)
        self.assertIn("20.0 ⚠", lines[4])
        self.assertNotIn("⚠", lines[5])
        self.assertIn("differ from dsv4kv on the same inputs (⚠): gather a (kernel: MISMATCH: gather output 0)", text)
        self.assertIn("Triton byte check not run (dsv4kv package not importable: x): gather b.", text)
        self.assertEqual(joined[0]["triton_verify"], "MISMATCH: gather output 0")

    def test_command_line_exit_status(self):
        with tempfile.TemporaryDirectory() as d:
            o, t = os.path.join(d, "o.json"), os.path.join(d, "t.json")
            with open(o, "w") as fh:
                json.dump(ours_json([ours_row("gather a", 10.0, 2e6)]), fh)
            for tus, want in ((20.0, 0), (5.0, 1)):
                with open(t, "w") as fh:
                    json.dump({"rows": [triton_row("gather a", tus)], "info": {}}, fh)
                p = subprocess.run([sys.executable, os.path.join(HERE, "compare.py"), o, t, "--json",
                                    os.path.join(d, "c.json")], capture_output=True, text=True)
                self.assertEqual(p.returncode, want, p.stdout + p.stderr)
                with open(os.path.join(d, "c.json")) as fh:
                    self.assertEqual(json.load(fh)["figures_met"], 1 - want)


if __name__ == "__main__":
    unittest.main()
