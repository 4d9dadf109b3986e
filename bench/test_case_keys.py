#!/usr/bin/env python3
"""Checks the cases dsv4kv_bench plans (`--list`, no GPU needed): the keys bench/triton_bench.py
and bench/compare.py join on, the chains, and --only / --filter.

Run: python3 bench/test_case_keys.py PATH/TO/dsv4kv_bench (also the CTest test bench_case_keys).
"""

from __future__ import annotations

import json
import subprocess
import sys
import unittest

BIN = ""


def listed(*args):
    p = subprocess.run([BIN, "--list", *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout.splitlines(), p.stderr


class CaseKeysTest(unittest.TestCase):
    def test_every_case_once_in_table_order_then_chains(self):
        rc, keys, _ = listed()
        self.assertEqual(rc, 0)
        lay = json.loads(subprocess.run([BIN, "--layout-json"], capture_output=True, text=True).stdout)
        a, u = lay["aligned_stride"], lay["unaligned_stride"]
        want = ([f"quantize tokens={n} stride={a}" for n in (1, 64, 4096, 16384, 65536)]
                + [f"quantize tokens=65536 stride={u}"]
                + [f"gather reqs={r} tokens={t} stride={a}" for r, t in
                   ((1, 128), (1, 8192), (1, 32000), (4, 8192), (16, 8192), (64, 2048), (256, 128))]
                + [f"gather reqs=16 tokens=8192 stride={u}"]
                + [f"sparse_gather rows={r} topk={k} stride={a}" for r, k in ((256, 512), (64, 2048), (1024, 2048))]
                + ["sparse_gather decode reqs=256 ctx=8192 topk=512", "sparse_gather decode-dense reqs=256 ctx=8192"]
                + [f"global_topk tokens={t} topk={k}" for t in (64, 8192) for k in (512, 2048)]
                + [f"combine tokens=8192 topk={k} window=128 image={i}" for k in (512, 2048) for i in (0, 64)]
                + ["mixed decode=256 prefill=8192 topk=512 window=128", "chain decode", "chain prefill"])
        self.assertEqual(keys, want)  # the same strings triton_bench.py writes

    def test_only_takes_short_and_full_names(self):
        self.assertEqual(listed("--only", "chain")[1], ["chain decode", "chain prefill"])
        rc, keys, _ = listed("--only", "compute_global_topk_indices_and_lens,mixed")
        self.assertEqual(rc, 0)
        self.assertEqual(len(keys), 5)
        self.assertTrue(all(k.split()[0] in ("global_topk", "mixed") for k in keys))

    def test_filter_and_unknown_op(self):
        self.assertEqual(listed("--filter", "stride=37378")[1][0].split()[0], "quantize")
        self.assertEqual(len(listed("--filter", "stride=37378")[1]), 2)
        rc, _, err = listed("--only", "nosuchop")
        self.assertEqual(rc, 64)
        self.assertIn("unknown op for --only: nosuchop", err)
        self.assertEqual(listed("--filter", "no such key")[0], 1)


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
