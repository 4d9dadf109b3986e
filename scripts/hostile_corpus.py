#!/usr/bin/env python3
"""Hostile-file corpus for the dsv4kv command-line program (standard library only).

  hostile_corpus.py generate OUT_DIR [--golden DIR] [--seed N]
      writes a few hundred malformed and mutated safetensors and .npy files to OUT_DIR, built
      from scratch and from the golden files (truncations, huge shapes, deep nesting, NUL bytes,
      bad dtypes, overlapping and out-of-range data_offsets, zero-size tensors with huge
      dimensions, extreme parameter values, header and data byte flips, strict-grammar .npy
      cases, rank-3 caches of the V4.1 records' widths, whole and cut short), plus
      OUT_DIR/manifest.json saying which files must be refused.
  hostile_corpus.py run DSV4KV OUT_DIR [--jobs N] [--timeout S] [--max-rss-mb M]
      runs `DSV4KV inspect FILE`, `DSV4KV check-golden FILE` and `DSV4KV convert FILE OUT --to RECORD`
      on every file, and inspect and check-golden on non-files
      (/dev/zero, a FIFO, a directory, a missing path, a symlink to /dev/zero, a sparse file over
      the size caps, a large sparse cache read one block at a time), and fails on any crash
      (signal), hang (timeout), run above the RSS limit, sanitizer report, exit status other than
      0/1/2, or malformed-file outcome other than status 1 with a one-line error.
  hostile_corpus.py all DSV4KV OUT_DIR [...]
      generate, then run.

scripts/sanitize.sh runs `all` with the ASan+UBSan build of the program.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SANITIZER_MARKERS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "runtime error:")


def token_bytes() -> int:
    """Bytes of one token record, as the spec header states it (written once, in spec/include)."""
    import re
    text = (ROOT / "spec" / "include" / "dsv4kv" / "spec" / "layout.hpp").read_text()
    m = re.search(r"static_assert\(.*kTokenBytes == (\d+)\)", text)
    if not m:
        raise SystemExit("hostile_corpus.py: kTokenBytes not found in spec/include/dsv4kv/spec/layout.hpp")
    return int(m.group(1))


TOKEN_BYTES = token_bytes()


def record_widths() -> list:
    """Token bytes of the DeepSeek-V4.1 records (528, 288, 68), as records.hpp states them."""
    import re
    text = (ROOT / "spec" / "include" / "dsv4kv" / "spec" / "records.hpp").read_text()
    widths = [int(w) for w in re.findall(r"static_assert\(detail::k\w+\.data_bytes\(\).*token_bytes\(\) == (\d+)\)", text)]
    if len(widths) != 3:
        raise SystemExit("hostile_corpus.py: the V4.1 token widths not found in spec/include/dsv4kv/spec/records.hpp")
    return widths


RECORD_WIDTHS = record_widths()


# ---------------------------------------------------------------------------
# Building files
# ---------------------------------------------------------------------------
def st_file(header: bytes | str, data: bytes = b"", length: int | None = None) -> bytes:
    if isinstance(header, str):
        header = header.encode()
    n = len(header) if length is None else length
    return struct.pack("<Q", n & 0xFFFFFFFFFFFFFFFF) + header + data


def st_build(entries, metadata=None, pad=True) -> bytes:
    """entries: list of (name, dtype, shape, data bytes); laid out in order, as safetensors does."""
    header, data = {}, b""
    for name, dtype, shape, blob in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return st_file(text, data)


def st_parse(blob: bytes):
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", None)
    data = blob[8 + n:]
    entries = []
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        b, end = e["data_offsets"]
        entries.append([name, e["dtype"], list(e["shape"]), data[b:end]])
    return entries, meta


def npy_file(header_text: str | bytes, data: bytes = b"", major: int = 1, minor: int = 0, pad: bool = True) -> bytes:
    h = header_text.encode("latin1") if isinstance(header_text, str) else header_text
    if pad:
        pre = 10 if major == 1 else 12
        h += b" " * (-(pre + len(h) + 1) % 64) + b"\n"
    ln = struct.pack("<H", len(h) & 0xFFFF) if major == 1 else struct.pack("<I", len(h) & 0xFFFFFFFF)
    return b"\x93NUMPY" + bytes([major, minor]) + ln + h + data


def npy_dict(descr="'|u1'", order="False", shape="()") -> str:
    return "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (descr, order, shape)


def cache_bytes(rng: random.Random, n: int) -> bytes:
    return bytes(rng.getrandbits(8) for _ in range(n))


# ---------------------------------------------------------------------------
# generate
# ---------------------------------------------------------------------------
class Corpus:
    def __init__(self, out: Path):
        self.out = out
        self.items = []

    def add(self, name: str, blob: bytes, reject: bool, note: str = ""):
        path = self.out / name
        path.write_bytes(blob)
        self.items.append({"file": name, "reject": reject, "note": note})


def from_scratch(c: Corpus, rng: random.Random):
    tb = TOKEN_BYTES
    # Not safetensors at all.
    for n in range(0, 9):
        c.add(f"short_{n}.safetensors", bytes(rng.getrandbits(8) for _ in range(n)), True, "shorter than a header")
    c.add("text.safetensors", b"#!/bin/sh\necho this is not a tensor file\n" * 4, True, "text")
    c.add("elf.safetensors", b"\x7fELF\x02\x01\x01" + bytes(57), True, "ELF")
    c.add("zeros.safetensors", bytes(4096), True, "zeros")
    c.add("ones.safetensors", b"\xff" * 4096, True, "0xff")
    for i in range(6):
        c.add(f"random_{i}.safetensors", cache_bytes(rng, rng.randrange(9, 5000)), True, "random bytes")
    # Header length lies.
    for i, n in enumerate([0, 1, 2, 3, 1 << 24, (1 << 24) + 1, 1 << 62, (1 << 64) - 1, 1 << 40]):
        c.add(f"hlen_{i}.safetensors", st_file(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\x01", n),
              True, f"header length {n}")
    # JSON syntax.
    good = b'{"t":{"dtype":"U8","shape":[2,2,%d],"data_offsets":[0,%d]}}' % (tb, 4 * tb)
    data = cache_bytes(rng, 4 * tb)
    c.add("valid_cache.safetensors", st_file(good, data), False, "valid rank-3 cache")
    for k in (1, 5, 10, len(good) // 2, len(good) - 1):
        c.add(f"json_trunc_{k}.safetensors", st_file(good[:k], data), True, "truncated JSON")
    for k in (1, 7, 20, len(good) - 2, len(good)):
        c.add(f"json_nul_{k}.safetensors", st_file(good[:k] + b"\x00" + good[k:], data), True, "NUL in header")
    c.add("json_nul_after.safetensors", st_file(good + b"\x00garbage}", data), True, "NUL after the object")
    c.add("json_trailing.safetensors", st_file(good + b"}", data), True, "trailing brace")
    c.add("json_leading_space.safetensors", st_file(b" " + good, data), True, "space before '{'")
    for i, bad in enumerate([b'{"t\x01":1}', b'{"\xff\xfe":1}', b'{"\xc0\xaf":1}', b'{"\xed\xa0\x80":1}',
                             b'{"\\ud800":1}', b'{"\\q":1}', b'{"t":1,}', b"{,}", b'{"a" 1}', b"{'t':1}",
                             b'{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},}']):
        c.add(f"json_bad_{i}.safetensors", st_file(bad, b"\x00"), True, "JSON syntax")
    # Deep nesting where the parser could recurse.
    for depth in (100, 10000, 200000):
        d = b"[" * depth + b"]" * depth
        c.add(f"deep_shape_{depth}.safetensors",
              st_file(b'{"t":{"dtype":"U8","shape":[' + d + b'],"data_offsets":[0,0]}}'), True, "nested shape entry")
        c.add(f"deep_extra_{depth}.safetensors",
              st_file(b'{"t":{"x":' + d + b',"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'), depth > 64,
              "nested unknown field")
        c.add(f"deep_meta_{depth}.safetensors", st_file(b'{"__metadata__":{"k":' + d + b"}}"), True, "nested metadata")
        c.add(f"deep_top_{depth}.safetensors", st_file(b"{" + b'"a":{' * depth + b"}" * (depth + 1)), True,
              "nested objects")
    # Duplicates.
    e1 = '"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}'
    e2 = '"t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}'
    c.add("dup_tensor.safetensors", st_file("{%s,%s}" % (e1, e2), b"\x01\x02"), True, "duplicate tensor")
    c.add("dup_field.safetensors", st_file('{"t":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}}', b"\x01"),
          True, "duplicate field")
    c.add("dup_meta.safetensors", st_file('{"__metadata__":{"op":"a","op":"b"}}'), True, "duplicate metadata key")
    # dtypes.
    for i, dt in enumerate(['"F32"', '"ZZ9"', '""', "7", "null", '["U8"]', '"' + "U" * 100000 + '"', '"U8\\u0000"',
                            '"F4"', '"BOOL"']):
        hdr = '{"t":{"dtype":%s,"shape":[3],"data_offsets":[0,3]}}' % dt
        c.add(f"dtype_{i}.safetensors", st_file(hdr, b"\x01\x02\x03"), i not in (1, 2, 6, 7, 9), "dtype " + dt[:20])
    # An unsupported dtype in another tensor must not hide the cache.
    c.add("other_dtype_beside_cache.safetensors",
          st_build([("a_f32", "F32", [2], bytes(8)), ("b_q", "Q9", [5], bytes(3)),
                    ("kv", "U8", [2, tb], cache_bytes(rng, 2 * tb))]), False, "F32 and unknown dtype beside the cache")
    # Shapes.
    shapes = ["[9223372036854775807]", "[9223372036854775808]", "[4294967296,4294967296]", "[-1]", "[1.5]", "[1e3]",
              '["1"]', "[true]", "[" + "9" * 1000 + "]", "[" + ",".join(["1"] * 65) + "]", "[" + ",".join(["1"] * 64) + "]",
              "{}", "3", "[2," + str(tb) + "]"]
    for i, s in enumerate(shapes):
        hdr = '{"t":{"dtype":"U8","shape":%s,"data_offsets":[0,1]}}' % s
        c.add(f"shape_{i}.safetensors", st_file(hdr, b"\x01"), i != 10, "shape " + s[:30])
    # Zero-size tensors with huge dimensions, alone and as a cache candidate.
    for i, s in enumerate([[0, 1 << 62], [1 << 62, 0], [1 << 62, 1 << 62, 0], [0, tb], [(1 << 63) - 1, 0, tb],
                           [0, (1 << 63) - 1, (1 << 63) - 1]]):
        for dt in ("U8", "I64"):
            c.add(f"zero_size_{i}_{dt}.safetensors", st_build([("kv", dt, s, b"")]), False, f"zero-size {s}")
    # data_offsets.
    for i, (a, b, n) in enumerate([(4, 2, 4), (2, 6, 4), (0, 1 << 64 - 1, 4), (-1, 3, 4), (0, 18446744073709551616, 4)]):
        hdr = '{"t":{"dtype":"U8","shape":[%d],"data_offsets":[%d,%d]}}' % (max(b - a, 0) if b < 1 << 40 else 1, a, b)
        c.add(f"offsets_{i}.safetensors", st_file(hdr, bytes(n)), True, "data_offsets")
    c.add("offsets_short.safetensors", st_file('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0]}}', b"\x00"), True, "[0]")
    c.add("offsets_triple.safetensors", st_file('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}', b"\x00"),
          True, "three offsets")
    ov = '{"a":{"dtype":"U8","shape":[2,%d],"data_offsets":[0,%d]},"b":{"dtype":"U8","shape":[1,%d],"data_offsets":[%d,%d]}}'
    c.add("overlap.safetensors", st_file(ov % (tb, 2 * tb, tb, tb, 2 * tb), bytes(2 * tb)), True, "overlapping tensors")
    c.add("gap.safetensors", st_file('{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"\x00\x01"), True, "gap")
    c.add("trailing_data.safetensors", st_file(good, data + b"\x00" * 100), True, "bytes after the last tensor")
    # Many tensors, long names, a big metadata map (memory and time of the parser).
    many = {f"t{i}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]} for i in range(100000)}
    c.add("many_tensors.safetensors", st_file(json.dumps(many, separators=(",", ":"))), False, "100k zero-size tensors")
    # The largest header accepted (16 MiB), made of the smallest entries: the parser's worst memory case.
    parts, size, i = [], 20, 0
    while size < (1 << 24) - 40:
        parts.append(f'"{i:x}":""')
        size += len(parts[-1]) + 1
        i += 1
    big = ('{"__metadata__":{' + ",".join(parts) + "}}").encode()
    c.add("big_metadata.safetensors", st_file(big), False, f"{i} metadata entries, header at the cap")
    c.add("big_metadata_truncated.safetensors", st_file(big[:-2]), True, "the same, unterminated")
    c.add("long_name.safetensors", st_build([("n" * 1000000 + "\n", "U8", [1], b"\x00")]), False, "1 MB tensor name")
    c.add("newline_name.safetensors", st_build([("a\nb\rc\x1b[31m", "U8", [2], b"\x00")]), True,
          "control characters in a name (size mismatch reported)")
    # Golden-looking metadata with hostile values.
    op = "compute_global_topk_indices_and_lens"  # any real operation
    for i, m in enumerate([{"op": "x\ny", "format": "dsv4kv-golden-v1", "num_cases": "1"},
                           {"op": op, "format": "dsv4kv-golden-v1", "num_cases": "100000"},
                           {"op": op, "format": "dsv4kv-golden-v1", "num_cases": "-1"},
                           {"op": op, "format": "dsv4kv-golden-v1", "num_cases": "99999999999999999999999"},
                           {"op": "quantize_and_insert_k_cache" * 10000, "format": "v1", "num_cases": "1"}]):
        c.add(f"golden_meta_{i}.safetensors", st_build([], m), True, "hostile golden metadata")
    # .npy from scratch.
    ok = npy_dict(shape=f"(2, 2, {tb})")
    d2 = cache_bytes(rng, 2 * 2 * tb)
    c.add("npy_valid_v1.npy", npy_file(ok, d2), False, "valid .npy")
    c.add("npy_valid_v2_rank3.npy", npy_file(npy_dict(shape=f"(2, 2, {tb})"), d2, 2), False, "valid .npy v2 rank 3")
    c.add("npy_valid_v3.npy", npy_file(npy_dict(shape=f"(2, {2 * tb},)"), d2, 3), False, "valid .npy v3")
    sh = f"(2, {2 * tb})"
    bad_dicts = [
        npy_dict(descr="'<u1'x", shape=sh), npy_dict(order="Falsey", shape=sh), npy_dict(shape="(1,, %d)" % (4 * tb)),
        npy_dict(shape="(1 2, %d)" % (2 * tb)), npy_dict(shape=f"({4 * tb})"), npy_dict(shape="(02, %d)" % (2 * tb)),
        npy_dict(shape="(2L, %d)" % (2 * tb)), npy_dict(shape="(99999999999999999999999, 1)"),
        npy_dict(shape="(" + ", ".join(["1"] * 65) + ")"), npy_dict(descr="'<f4'", shape=sh),
        npy_dict(order="True", shape=sh), npy_dict(descr="'|u1\\x00'", shape=sh),
        "{'descr': '|u1', 'descr': '|u1', 'fortran_order': False, 'shape': %s}" % sh,
        "{'descr': '|u1', 'shape': %s}" % sh, "{'descr': '|u1', 'fortran_order': False, 'shape': %s, 'x': 1}" % sh,
        "{'descr': '|u1', 'fortran_order': False, 'shape': %s} trailing" % sh, "[1, 2]", "", "{",
        "{'descr': '|u1', 'fortran_order': False, 'shape': (9223372036854775807, 9223372036854775807)}",
        "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 9223372036854775807, 9223372036854775807)}",
        "{'descr': '|u1', 'fortran_order': False, 'shape': ((2, 3), 4)}", "{" * 10000 + "}" * 10000,
        "{'descr': '|u1', 'fortran_order': False, 'shape': " + "(" * 10000 + ")" * 10000 + "}",
    ]
    for i, d in enumerate(bad_dicts):
        reject = "(0, 9223372036854775807" not in d
        c.add(f"npy_bad_{i}.npy", npy_file(d, d2), reject, "npy header: " + d[:40])
    c.add("npy_nul.npy", npy_file(ok.replace("'shape'", "'sha\x00pe'"), d2), True, "NUL in npy header")
    c.add("npy_nonascii.npy", npy_file(ok.encode() + b"\xe9", d2), True, "non-ASCII npy header")
    for major, minor in ((0, 0), (1, 1), (4, 0), (255, 255)):
        c.add(f"npy_version_{major}_{minor}.npy", npy_file(ok, d2, major, minor), True, "npy version")
    long_hdr = npy_file(ok, d2, 2)
    c.add("npy_hlen_huge.npy", long_hdr[:8] + struct.pack("<I", 0xFFFFFFFF) + long_hdr[12:], True, "npy header length 2^32-1")
    c.add("npy_hlen_past.npy", long_hdr[:8] + struct.pack("<I", len(long_hdr)) + long_hdr[12:], True, "npy header past end")
    valid = npy_file(ok, d2)
    for k in sorted({1, 6, 7, 8, 9, 10, 11, 40, 80, 127, 128, 129, len(valid) - 1}):
        c.add(f"npy_trunc_{k}.npy", valid[:k], True, "truncated .npy")
    c.add("npy_data_long.npy", valid + b"\x00", True, ".npy data longer than its shape")
    # The V4.1 records: a rank-3 [n, B, W] cache whose W is a record's width is read as that record.
    for w in RECORD_WIDTHS:
        blob = cache_bytes(rng, 2 * 4 * w)
        cache = npy_file(npy_dict(shape=f"(2, 4, {w})"), blob)
        c.add(f"v41_{w}.npy", cache, False, f"valid rank-3 cache of the {w}-byte record")
        c.add(f"v41_{w}.safetensors", st_build([("kv", "U8", [2, 4, w], blob)]), False, f"the same, safetensors")
        c.add(f"v41_{w}_rank2.npy", npy_file(npy_dict(shape=f"(2, {4 * w})"), blob), False,
              f"the {w}-byte record as [n, stride]: read as the 584-byte record or refused")
        c.add(f"v41_{w}_cut.npy", cache[:-1], True, f"{w}-byte record cache cut short")
        c.add(f"v41_{w}_cut_header.safetensors", st_build([("kv", "U8", [2, 4, w], blob)])[:60], True,
              f"{w}-byte record safetensors cut in the header")
        c.add(f"v41_{w}_zero_rows.npy", npy_file(npy_dict(shape=f"(2, 0, {w})")), True,
              f"{w}-byte record with block size 0: no block size")
        c.add(f"v41_{w}_huge_rows.npy", npy_file(npy_dict(shape=f"(0, {1 << 56}, {w})")), False,
              f"{w}-byte record, no block, a huge block size")
    c.add("v41_no_record_width.npy", npy_file(npy_dict(shape="(2, 4, 1000)"), bytes(8000)), True,
          "rank 3, a width that is no record's: no block size")
    for i in range(12):
        b = bytearray(valid)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(6, 128)] = rng.getrandbits(8)
        c.add(f"npy_flip_{i}.npy", bytes(b), False, ".npy header byte flips")


def golden_mutations(c: Corpus, rng: random.Random, golden: Path):
    files = sorted(golden.glob("*.safetensors"))
    for g in files:
        blob = g.read_bytes()
        stem = g.stem
        entries, meta = st_parse(blob)
        # One case only: quick to run, and every mutation lands in the case that runs.
        one = [e for e in entries if e[0].startswith("case000.") or not e[0].startswith("case")]
        m1 = dict(meta or {})
        m1["num_cases"] = "1"
        base = st_build(one, m1)
        c.add(f"g_{stem}_case0.safetensors", base, False, "golden, first case only")
        n = struct.unpack("<Q", base[:8])[0]
        # Truncations.
        for k in sorted({9, n // 2, n + 7, n + 8, (n + 8 + len(base)) // 2, len(base) - 1}):
            c.add(f"g_{stem}_trunc_{k}.safetensors", base[:k], True, "truncated golden file")
        c.add(f"g_{stem}_hlen_plus1.safetensors", struct.pack("<Q", n + 1) + base[8:], True, "header length + 1")
        c.add(f"g_{stem}_hlen_minus1.safetensors", struct.pack("<Q", n - 1) + base[8:], True, "header length - 1")
        # NUL and byte flips in the header; byte flips in the data.
        k = rng.randrange(9, 8 + n - 1)
        c.add(f"g_{stem}_hnul.safetensors", base[:k] + b"\x00" + base[k + 1:], True, "NUL in the header")
        for i in range(3):
            b = bytearray(base)
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(8, 8 + n)] = rng.choice([0x00, 0x22, 0x2C, 0x5B, 0x5D, 0x7B, 0x7D, 0x30, 0x39, 0x2D,
                                                          rng.getrandbits(8)])
            c.add(f"g_{stem}_hflip_{i}.safetensors", bytes(b), False, "header byte flips")
        if len(base) > 8 + n:
            b = bytearray(base)
            for _ in range(16):
                b[rng.randrange(8 + n, len(base))] = rng.getrandbits(8)
            c.add(f"g_{stem}_dflip.safetensors", bytes(b), False, "data byte flips")
        tensors = [e for e in one if e[0].startswith("case000.")]
        params = [e for e in tensors if ".param." in e[0]]
        arrays = [e for e in tensors if ".param." not in e[0]]
        # Extreme parameter values (the runner reads sizes, strides and counts from them).
        extremes = [-1, 0, 1 << 31, 1 << 62, -(1 << 63), (1 << 63) - 1]
        for e in rng.sample(params, min(len(params), 7)):
            for v in rng.sample(extremes, 3):
                mut = [list(x) for x in one]
                for x in mut:
                    if x[0] == e[0]:
                        x[3] = struct.pack("<q", v)
                c.add(f"g_{stem}_{e[0].split('.')[-1]}_{v & 0xFFFFFFFFFFFFFFFF:x}.safetensors", st_build(mut, m1),
                      False, f"param {e[0]} = {v}")
        # Parameters that only hurt together: zero out strides under a huge out_dim1 and huge
        # sequence lengths (an out view stacking 2^31 rows on one buffer).
        names = {e[0] for e in params}
        if {"case000.param.out_stride0", "case000.param.out_stride1", "case000.param.out_dim1"} <= names:
            mut = [list(x) for x in one]
            for x in mut:
                if x[0] in ("case000.param.out_stride0", "case000.param.out_stride1"):
                    x[3] = struct.pack("<q", 0)
                elif x[0] == "case000.param.out_dim1":
                    x[3] = struct.pack("<q", (1 << 31) - 1)
                elif x[0] == "case000.seq_lens":
                    x[3] = struct.pack("<i", (1 << 31) - 1) * (len(x[3]) // 4)
            c.add(f"g_{stem}_stacked_rows.safetensors", st_build(mut, m1), False, "zero strides, 2^31 rows")
        # Extreme values inside index tensors.
        for e in rng.sample(arrays, min(len(arrays), 3)):
            if e[1] not in ("I32", "I64") or not e[3]:
                continue
            size = 4 if e[1] == "I32" else 8
            fmt = "<i" if size == 4 else "<q"
            lim = 31 if size == 4 else 63
            for v in (-(1 << lim), (1 << lim) - 1, -2):
                mut = [list(x) for x in one]
                for x in mut:
                    if x[0] == e[0]:
                        b = bytearray(x[3])
                        at = rng.randrange(len(b) // size) * size
                        b[at:at + size] = struct.pack(fmt, v)
                        x[3] = bytes(b)
                c.add(f"g_{stem}_{e[0].split('.')[-1]}_val{v & 0xFFFFFFFFFFFFFFFF:x}.safetensors", st_build(mut, m1),
                      False, f"value {v} in {e[0]}")
        # Zero-size tensors with huge dimensions in place of real ones.
        for e in rng.sample(arrays, min(len(arrays), 3)):
            for shape in ([1 << 62] + [0] * max(len(e[2]) - 1, 0), [0] + [1 << 62] * max(len(e[2]) - 1, 0)):
                mut = [list(x) for x in one]
                for x in mut:
                    if x[0] == e[0]:
                        x[2], x[3] = shape, b""
                c.add(f"g_{stem}_{e[0].split('.')[-1]}_zero_{shape[0] > 0:d}.safetensors", st_build(mut, m1), False,
                      f"{e[0]} zero-size {shape}")
        # Structural mutations of one tensor: dtype, transposed shape, dropped, reversed offsets.
        e = rng.choice(arrays)
        size_of = {"F32": 4, "U8": 1, "I64": 8, "I32": 4, "BF16": 2, "BOOL": 1}
        for dt in ("F32", "ZZ", "U8", "I64"):
            mut = [list(x) for x in one]
            for x in mut:
                if x[0] == e[0]:
                    x[1] = dt
            # Refused when the byte size no longer fits the shape; an undefined dtype is only listed.
            reject = dt != "ZZ" and len(e[3]) > 0 and size_of[dt] != size_of.get(e[1], 0)
            c.add(f"g_{stem}_dtype_{dt}.safetensors", st_build(mut, m1), reject, f"{e[0]} as {dt}")
        if len(e[2]) == 2:
            mut = [list(x) for x in one]
            for x in mut:
                if x[0] == e[0]:
                    x[2] = [e[2][1], e[2][0]]
            c.add(f"g_{stem}_transposed.safetensors", st_build(mut, m1), False, f"{e[0]} transposed")
        # A tensor removed from the header but not from the data: a gap.
        hdr = json.loads(base[8:8 + n])
        victim = rng.choice([k for k in hdr if k != "__metadata__"])
        if hdr[victim]["data_offsets"][0] != hdr[victim]["data_offsets"][1]:
            del hdr[victim]
            c.add(f"g_{stem}_hole.safetensors", st_file(json.dumps(hdr).encode(), base[8 + n:]), True,
                  "tensor dropped from the header")
        hdr = json.loads(base[8:8 + n])
        victim = rng.choice([k for k in hdr if k != "__metadata__"])
        a, b = hdr[victim]["data_offsets"]
        if a != b:
            hdr[victim]["data_offsets"] = [b, a]
            c.add(f"g_{stem}_reversed.safetensors", st_file(json.dumps(hdr).encode(), base[8 + n:]), True,
                  "reversed data_offsets")
            hdr[victim]["data_offsets"] = [a, b + len(base)]
            c.add(f"g_{stem}_past_end.safetensors", st_file(json.dumps(hdr).encode(), base[8 + n:]), True,
                  "data_offsets past the end")
    # Whole golden files, some with many cases, untouched (the runner's normal path under the sanitizers).
    for g in files[:3]:
        c.add(f"whole_{g.name}", g.read_bytes(), False, "golden file as shipped")


def generate(out: Path, golden: Path, seed: int) -> list:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    # TOKEN_BYTES comes from the spec header, not from a golden block stride: vLLM's padded
    # stride is not a whole number of tokens' bytes, and the inspector infers the block size from it.
    rng = random.Random(seed)
    c = Corpus(out)
    from_scratch(c, rng)
    if golden.is_dir():
        golden_mutations(c, rng, golden)
    (out / "manifest.json").write_text(json.dumps({"token_bytes": TOKEN_BYTES, "files": c.items}, indent=1))
    return c.items


# ---------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------
def run_one(cmd, timeout, env, stdin_close_after=None):
    """Runs cmd; returns dict(status, signal, timed_out, rss_mb, stdout, stderr, seconds).

    rss_mb is the child's ru_maxrss, which also counts this (small) process's RSS at fork time."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        if stdin_close_after is None:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, start_new_session=True)
        else:  # read a few bytes of stdout, then close it (`| head`)
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env,
                                 start_new_session=True)
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        if stdin_close_after is not None:
            p.stdout.read(stdin_close_after)
            p.stdout.close()
        _, status, ru = os.wait4(p.pid, 0)
        timer.cancel()
        p.returncode = 0  # reaped above; keep Popen from waiting again
        out.seek(0)
        err.seek(0)
        return {
            "status": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "timed_out": timed_out.is_set(),
            "rss_mb": ru.ru_maxrss / 1024.0,
            "stdout": out.read(1 << 20).decode("utf-8", "replace") if stdin_close_after is None else "",
            "stderr": err.read(1 << 20).decode("utf-8", "replace"),
            "seconds": time.monotonic() - t0,
        }


def judge(job, r, max_rss_mb):
    """The list of problems with one run (empty = fine)."""
    problems = []
    if r["timed_out"]:
        problems.append("hang (killed after the timeout)")
    elif r["signal"] is not None:
        problems.append(f"killed by signal {r['signal']}")
    if r["rss_mb"] > max_rss_mb:
        problems.append(f"RSS {r['rss_mb']:.0f} MB > {max_rss_mb} MB")
    if any(m in r["stderr"] for m in SANITIZER_MARKERS):
        problems.append("sanitizer report")
    if problems:
        return problems
    st = r["status"]
    if st not in (0, 1, 2):
        problems.append(f"exit status {st}")
        return problems
    err_lines = [line for line in r["stderr"].splitlines() if line]
    cmd = job["cmd"]
    if cmd == "inspect":
        if st != 0 and len(err_lines) != 1:
            problems.append(f"exit {st} with {len(err_lines)} lines on stderr (want one)")
        if st == 0 and err_lines:
            problems.append("exit 0 with text on stderr")
        if st == 0 and not job.get("piped") and not r["stdout"].rstrip("\n").split("\n")[-1].startswith("summary:"):
            problems.append("exit 0 without a summary line")
        if job.get("reject") and st != 1:
            problems.append(f"malformed file accepted or wrong status (exit {st}, want 1)")
        if job.get("want") is not None and st != job["want"]:
            problems.append(f"exit {st}, want {job['want']}")
        if job.get("expect") and job["expect"] not in r["stderr"]:
            problems.append(f"stderr lacks {job['expect']!r}")
    elif cmd == "convert":
        if st != 0 and len(err_lines) != 1:
            problems.append(f"exit {st} with {len(err_lines)} lines on stderr (want one)")
        if st == 0 and (err_lines or " -> " not in r["stdout"]):
            problems.append("exit 0 without a summary line, or with text on stderr")
        if job.get("reject") and st != 1:
            problems.append(f"malformed file accepted or wrong status (exit {st}, want 1)")
        if (st == 0) != os.path.isfile(job["dest"]):
            problems.append(f"exit {st} but OUT {'missing' if st == 0 else 'written'}")
    elif cmd == "check-golden":
        if job.get("reject") and (st != 1 or "FAIL" not in r["stdout"]):
            problems.append(f"malformed file not reported as FAIL with exit 1 (exit {st})")
        if st == 0 and job.get("reject") is not None and "FAIL" in r["stdout"]:
            problems.append("exit 0 with FAIL lines")
        if job.get("expect") and job["expect"] not in r["stdout"]:
            problems.append(f"stdout lacks {job['expect']!r}")
        if st == 2:
            problems.append("usage error for a file argument")
    return problems


def special_jobs(work: Path, token_bytes: int):
    """Non-files and size-cap cases, created in `work`."""
    jobs = []
    fifo = work / "fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    (work / "a_directory").mkdir(exist_ok=True)
    link = work / "link_to_dev_zero"
    if not link.is_symlink():
        link.symlink_to("/dev/zero")
    for path, expect in [("/dev/zero", "not a regular file (a character device)"),
                         ("/dev/urandom", "not a regular file (a character device)"),
                         ("/dev/null", "not a regular file (a character device)"),
                         (str(fifo), "not a regular file (a FIFO)"),
                         (str(work / "a_directory"), "not a regular file (a directory)"),
                         (str(link), "not a regular file (a character device)"),
                         (str(work / "missing"), "cannot open"),
                         ("/proc/self/status", "not a safetensors file")]:
        jobs.append({"cmd": "inspect", "args": [path], "reject": True, "expect": expect, "name": path})
        jobs.append({"cmd": "check-golden", "args": [path], "reject": True, "expect": expect, "name": path})
    # A sparse file above both size caps: refused from its size, nothing is read.
    huge = work / "sparse_8g.safetensors"
    with open(huge, "wb") as f:
        f.write(st_file(b'{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\x00"))
        f.truncate(8 << 30)
    jobs.append({"cmd": "inspect", "args": [str(huge)], "reject": True, "expect": "over the limit", "name": huge.name})
    jobs.append({"cmd": "check-golden", "args": [str(huge)], "reject": True, "expect": "over the limit",
                 "name": huge.name})
    # A valid ~200 MB sparse cache read one block at a time: the file is mapped, never copied.
    blocks, stride = 5400, 64 * token_bytes + 64
    hdr = json.dumps({"kv": {"dtype": "U8", "shape": [blocks, stride], "data_offsets": [0, blocks * stride]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    big = work / "sparse_cache_200m.safetensors"
    with open(big, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr)
        f.truncate(8 + len(hdr) + blocks * stride)
    for args in (["--block", "0", "--token", "0"], ["--block", str(blocks - 1)], ["--block", "17", "--fnuz"]):
        jobs.append({"cmd": "inspect", "args": [str(big)] + args, "want": 0, "name": big.name + " " + " ".join(args),
                     "max_rss_mb": 200})
    jobs.append({"cmd": "inspect", "args": [str(big), "--block", str(blocks)], "want": 1, "name": big.name + " past end"})
    # `| head`: the reader goes away; the program must stop quietly (exit 0, no signal, no message).
    jobs.append({"cmd": "inspect", "args": [str(big)], "want": 0, "piped": True, "name": big.name + " | head"})
    # Usage errors.
    for args in (["--block", "-5"], ["--token=-1"], ["--block-size", "0"], ["--rope", "-1"], ["--max-file-size", "-1"],
                 ["--format", "fp4"], ["--record="], ["--format"], ["--fnuz", "--format", "mxfp8_ds_mla"]):
        jobs.append({"cmd": "inspect", "args": [str(big)] + args, "want": 2, "name": "usage " + " ".join(args)})
    # --format against a V4.1 record's rank-3 cache: its own record, another, one on a cache cut short.
    v41 = work / "v41_528.npy"
    v41.write_bytes(npy_file(npy_dict(shape="(3, 8, 528)"), (bytes(range(256)) * 50)[:3 * 8 * 528]))
    for args, want, expect in ((["--format", "mxfp8_ds_mla"], 0, None), (["--record", "nvfp4_ds_mla"], 1, "does not fit"),
                               (["--format", "fp8_ds_mla", "--block", "2"], 1, "does not fit"),
                               (["--fnuz"], 1, "--fnuz applies to record fp8_ds_mla only"),
                               (["--block-size", "9"], 1, "needs 4752 bytes per block")):
        jobs.append({"cmd": "inspect", "args": [str(v41)] + args, "want": want, "expect": expect,
                     "name": v41.name + " " + " ".join(args)})
    jobs.append({"cmd": "inspect", "args": [str(big), "--format", "mxfp8_ds_mla", "--block", "7"], "want": 1,
                 "expect": "cannot infer the block size of record mxfp8_ds_mla", "name": big.name + " as mxfp8_ds_mla"})
    return jobs


def run(dsv4kv: str, out: Path, jobs_n: int, timeout: float, max_rss_mb: float) -> int:
    manifest = json.loads((out / "manifest.json").read_text())
    work = out / "special"
    work.mkdir(exist_ok=True)
    jobs = []
    converted = work / "converted"
    if converted.exists():
        shutil.rmtree(converted)
    converted.mkdir()
    for i, item in enumerate(manifest["files"]):
        path = str(out / item["file"])
        for cmd in ("inspect", "check-golden"):
            jobs.append({"cmd": cmd, "args": [path], "reject": item["reject"], "name": item["file"]})
        # convert reads the file as inspect does (a file inspect refuses, convert refuses) and writes
        # OUT whole or not at all; the target record cycles through the attention records.
        target = ("mxfp8_ds_mla", "nvfp4_ds_mla", "fp8_ds_mla")[i % 3]
        dest = converted / f"{i}.{'npy' if i % 2 else 'safetensors'}"
        jobs.append({"cmd": "convert", "args": [path, str(dest), "--to", target], "reject": item["reject"],
                     "name": item["file"], "dest": str(dest)})
    jobs += special_jobs(work, manifest["token_bytes"])
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1:abort_on_error=1")
    failures, slow, peak = [], [], (0.0, "")
    t0 = time.monotonic()

    def task(job):
        cmd = [dsv4kv, job["cmd"]] + job["args"]
        r = run_one(cmd, timeout, env, 4096 if job.get("piped") else None)
        return job, r, judge(job, r, job.get("max_rss_mb", max_rss_mb))

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs_n) as pool:
        for job, r, problems in pool.map(task, jobs):
            if r["rss_mb"] > peak[0]:
                peak = (r["rss_mb"], f"{job['cmd']} {job['name']}")
            slow.append((r["seconds"], f"{job['cmd']} {job['name']}"))
            if problems:
                failures.append((job, r, problems))
    leftovers = sorted(p.name for p in converted.iterdir() if not p.name.split(".")[0].isdigit() or p.name.count(".") != 1)
    if leftovers:
        failures.append(({"cmd": "convert", "name": "(all)"}, {"stderr": ""}, [f"temporary files left: {leftovers[:5]}"]))
    slow.sort(reverse=True)
    print(f"hostile corpus: {len(jobs)} runs of {dsv4kv} on {len(manifest['files'])} files + "
          f"{len(jobs) - 3 * len(manifest['files'])} special cases in {time.monotonic() - t0:.0f} s; "
          f"peak RSS {peak[0]:.0f} MB ({peak[1]}); slowest {slow[0][0]:.1f} s ({slow[0][1]})")
    for job, r, problems in failures[:int(os.environ.get("HOSTILE_SHOW", "40"))]:
        print(f"FAIL {job['cmd']} {job['name'][:120]}: {'; '.join(problems)}")
        tail = (r["stderr"].strip().splitlines() or [""])[-12:]
        for line in tail:
            print("    " + line[:300])
    if failures:
        print(f"hostile corpus: {len(failures)} failing runs")
        return 1
    print("hostile corpus: no crash, hang, sanitizer report or RSS over the limit; every malformed file refused")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    root = ROOT
    for name in ("generate", "run", "all"):
        p = sub.add_parser(name)
        if name != "generate":
            p.add_argument("dsv4kv")
        p.add_argument("out", type=Path)
        p.add_argument("--golden", type=Path, default=root / "conformance" / "golden")
        p.add_argument("--seed", type=int, default=20240601)
        p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
        p.add_argument("--timeout", type=float, default=30.0)
        p.add_argument("--max-rss-mb", type=float, default=1024.0)
    a = ap.parse_args()
    if a.what == "generate":
        items = generate(a.out, a.golden, a.seed)
        print(f"hostile corpus: {len(items)} files in {a.out} ({sum(i['reject'] for i in items)} must be refused)")
    if a.what == "all":
        # Generate in another process: a child's ru_maxrss includes the RSS its parent had when it
        # forked, so the process that runs the program under test must stay small.
        subprocess.run([sys.executable, __file__, "generate", str(a.out), "--golden", str(a.golden), "--seed",
                        str(a.seed)], check=True)
    if a.what in ("run", "all"):
        return run(a.dsv4kv, a.out, a.jobs, a.timeout, a.max_rss_mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
