#!/usr/bin/env python3
"""Checks the cases dsv4kv_bench plans (`--list`, no GPU needed) against the keys
bench/triton_bench.py would time (its `--list`, no GPU or torch needed): the keys
bench/compare.py joins on, the chains last, and --only / --filter / --light with names taken
from the lists.

Run: python3 bench/test_case_keys.py PATH/TO/dsv4kv_bench (also the CTest test bench_case_keys).
"""

from __future__ import annotations

import os
import subprocess
import sys
import unittest

BIN = ""
TRITON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "triton_bench.py")


def listed(*args):
    p = subprocess.run([BIN, "--list", *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout.splitlines(), p.stderr


def triton_listed(*args):
    p = subprocess.run([sys.executable, TRITON, "--bench-bin", BIN, "--list", *args], capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout.splitlines(), p.stderr


def groups(keys):
    """The first word of each key (the short op name, or "chain"), in order of first appearance."""
    return list(dict.fromkeys(k.split()[0] for k in keys))


class CaseKeysTest(unittest.TestCase):
    def test_every_case_once_and_the_same_keys_as_triton_bench(self):
        rc, keys, err = listed()
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(keys), len(set(keys)), "a key is planned twice")
        rc, tkeys, err = triton_listed()
        self.assertEqual(rc, 0, err)
        self.assertEqual(keys, tkeys)  # the strings triton_bench.py writes, in the same order
        g = groups(keys)
        self.assertEqual(g[-1], "chain")  # the chains come last ...
        self.assertEqual(keys[-2:], ["chain decode", "chain prefill"])
        self.assertGreaterEqual(len(g), 7)  # ... after every operation of the table
        # each group's keys are contiguous (table order, one block per operation)
        self.assertEqual([k.split()[0] for k in keys], sorted((k.split()[0] for k in keys), key=g.index))

    def test_only_takes_short_and_full_names(self):
        _, keys, _ = listed()
        g = [x for x in groups(keys) if x != "chain"]
        self.assertEqual(listed("--only", "chain")[1], ["chain decode", "chain prefill"])
        for short in g:
            rc, got, err = listed("--only", short)
            self.assertEqual(rc, 0, err)
            self.assertEqual(got, [k for k in keys if k.split()[0] == short])
            self.assertEqual(triton_listed("--only", short)[1], got)
        # the full names (triton_bench.py's aliases: importable without torch) select the same keys
        sys.path.insert(0, os.path.dirname(TRITON))
        import triton_bench

        self.assertEqual(sorted(set(triton_bench.ALIASES.values())), sorted(g))
        for full, short in triton_bench.ALIASES.items():
            self.assertEqual(listed("--only", full)[1], listed("--only", short)[1], full)
        # two at once, in table order whatever the order asked
        full0 = next(f for f, s in triton_bench.ALIASES.items() if s == g[0])
        want = [k for k in keys if k.split()[0] in (g[0], g[-1])]
        self.assertEqual(listed("--only", f"{g[-1]},{full0}")[1], want)
        self.assertEqual(triton_listed("--only", f"{g[-1]},{full0}")[1], want)

    def test_pdl_adds_a_variant_after_each_chain(self):
        _, keys, _ = listed()
        rc, got, err = listed("--pdl")
        self.assertEqual(rc, 0, err)
        want = []
        for k in keys:
            want += [k, k + " pdl"] if k.split()[0] == "chain" else [k]
        self.assertEqual(got, want)
        self.assertEqual(listed("--pdl", "--only", "chain")[1],
                         ["chain decode", "chain decode pdl", "chain prefill", "chain prefill pdl"])
        self.assertEqual(listed("--pdl", "--filter", "pdl")[1], ["chain decode pdl", "chain prefill pdl"])
        self.assertEqual(listed("--pdl", "--light", "--only", "chain")[1], ["chain decode", "chain decode pdl"])

    def test_filter_light_and_unknown_op(self):
        _, keys, _ = listed()
        probe = keys[len(keys) // 2]
        rc, got, _ = listed("--filter", probe)
        self.assertEqual(rc, 0)
        self.assertEqual(got, [k for k in keys if probe in k])
        self.assertEqual(triton_listed("--filter", probe)[1], got)
        rc, light, _ = listed("--light")
        self.assertEqual(rc, 0)
        self.assertTrue(0 < len(light) < len(keys) and set(light) <= set(keys))
        self.assertIn("chain decode", light)
        self.assertNotIn("chain prefill", light)
        rc, _, err = listed("--only", "nosuchop")
        self.assertEqual(rc, 64)
        self.assertIn("unknown op for --only: nosuchop", err)
        self.assertEqual(listed("--filter", "no such key")[0], 1)
        self.assertEqual(triton_listed("--filter", "no such key")[0], 1)
        self.assertNotEqual(triton_listed("--only", "nosuchop")[0], 0)


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
