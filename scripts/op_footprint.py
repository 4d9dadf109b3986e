#!/usr/bin/env python3
"""How many code files name each operation of the table (ARCHITECTURE.md, "What an operation is").

    python3 scripts/op_footprint.py [SOURCE_DIR] [--files OP]     (CTest: op_footprint)

The operations are read from spec/include/dsv4kv/spec/op_table.hpp (the X(name, Args, stem)
lines of DSV4KV_OPS). A code file names an operation when its text contains the operation's function name
or its argument struct's name as a whole identifier, or a file name of one of its modules
(`<short>.<ext>` or `<short>_properties.<ext>`, where the short names are the stems of the files
that define its reference function, its CUDA function, its tester (TesterOf<Args>) and its demo
step (DemoStep<Args>)). Code files: every file of the source tree except Markdown (*.md), docs/,
binary files and data (golden vectors, fuzz corpora); the list comes from `git ls-files` (tracked and untracked, not ignored) when the
tree is a git checkout, else from walking it (skipping hidden folders and build trees).

An operation may be named by at most LIMIT (12) code files: what adding one costs. The five
operations that predate the table are also named by tests written for them alone (upstream
comparisons, golden files, smoke and FTZ tests), so each has a ceiling of its own, its count when
the check was written; a ceiling may be lowered, and raised only for a tool written for that
operation alone (a golden generator). Exit status 1 when an operation is over its limit (its files
are listed), else 0.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

LIMIT = 12
#: Operations older than the table: their counts when the check was written (they may only fall),
#: with the PDL test's chain of dependent operations (conformance/pdl_test.cpp) and the host-cost
#: figures and fast-path tests (bench/host_cost.py, python/tests/test_torch_ops.py,
#: which name quantize and global_topk as their examples) counted, and the cache conversion that
#: composes the sparse gather and quantize (harness/convert.cpp, conformance/convert_test.cpp).
CEILINGS = {
    # Plus the V4.1 records' golden generator (bench/make_golden_records.py), written for these two alone.
    "quantize_and_insert_k_cache": 41,
    "dequantize_and_gather_k_cache": 37,
    # The three index operations: plus the golden generator of their upstream semantics profiles
    # (bench/make_golden_upstream.py), written for these three alone.
    "compute_global_topk_indices_and_lens": 25,
    "combine_topk_swa_indices": 16,
    "build_flashinfer_mixed_sparse_indices": 18,
    # The sixth operation's twelve plus its golden generator (bench/make_golden_sparse_gather.py), a
    # tool written for it alone, as the older operations' golden files have theirs.
    "dequantize_and_gather_k_cache_sparse": 15,
}
DATA_DIRS = ("corpus", "golden")  # folders of data files, not code


def source_files(root: str) -> list[str]:
    """Paths relative to root: git's list when root is a git checkout, else a walk."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True, timeout=60, check=True)
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             timeout=60, check=True).stdout.strip()
        if os.path.realpath(top) == os.path.realpath(root):
            files = [f for f in out.stdout.decode().split("\0") if f]
            return [f for f in files if os.path.isfile(os.path.join(root, f))]
    except (OSError, subprocess.SubprocessError):
        pass
    files = []
    for d, dirs, names in os.walk(root):
        # Hidden folders, Python caches and build trees (a CMakeCache.txt marks one) are not sources.
        dirs[:] = [x for x in dirs if not x.startswith(".") and x != "__pycache__"
                   and not os.path.exists(os.path.join(d, x, "CMakeCache.txt"))]
        files += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return files


def is_code(path: str, text: str | None) -> bool:
    parts = path.replace(os.sep, "/").split("/")
    if path.endswith(".md") or parts[0] == "docs" or any(p in DATA_DIRS for p in parts[:-1]):
        return False
    return text is not None


def read_text(path: str) -> str | None:
    """The file's text; None for binary files (a NUL byte, or not UTF-8)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def ops_of(root: str) -> list[tuple[str, str, str]]:
    """(function, Args, stem) of every DSV4KV_OPS entry, in table order."""
    lines = (read_text(os.path.join(root, "spec/include/dsv4kv/spec/op_table.hpp")) or "").splitlines()
    body = []
    for i, line in enumerate(lines):
        if line.startswith("#define DSV4KV_OPS(X)"):
            j = i
            while lines[j].rstrip().endswith("\\") and j + 1 < len(lines):  # the macro's continuation lines
                j += 1
                body.append(lines[j])
            break
    return re.findall(r"X\((\w+),\s*(\w+),\s*(\w+)\)", "\n".join(body))


#: The per-operation files every layer has, named by the table's stem.
STEM_FILES = ("reference/src/{s}.cpp", "cuda/src/{s}.cu", "conformance/support/ops/{s}.hpp",
              "conformance/support/ops/{s}_properties.hpp", "tools/demo/{s}.hpp", "python/tests/op_cases/{s}.py")


def word(w: str) -> str:
    return r"(?<![A-Za-z0-9_])" + re.escape(w) + r"(?![A-Za-z0-9_])"


def main() -> int:
    args = sys.argv[1:]
    show = ""
    if "--files" in args:
        i = args.index("--files")
        show = args[i + 1] if i + 1 < len(args) else ""
        del args[i:i + 2]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ops = ops_of(root)
    if len(ops) < 2:
        print(f"op_footprint: no DSV4KV_OPS table found under {root}")
        return 1
    texts = {}
    for f in source_files(root):
        t = read_text(os.path.join(root, f))
        if is_code(f, t) and os.path.realpath(os.path.join(root, f)) != os.path.realpath(__file__):  # not itself
            texts[f.replace(os.sep, "/")] = t

    # Short names: the stems of the files that define the operation's pieces.
    definers = [("reference/src/", ".cpp", r"\b{fn}\(const {args}&"), ("cuda/src/", ".cu", r"\b{fn}\(const {args}&"),
                ("conformance/support/ops/", ".hpp", r"struct TesterOf<{args}>"),
                ("tools/demo/", ".hpp", r"struct DemoStep<{args}>")]
    failed = False
    print(f"{'operation':<40} {'files':>5} {'limit':>5}  short names")
    for fn, args_name, stem in ops:
        shorts = set()
        for folder, ext, pat in definers:
            rx = re.compile(pat.format(fn=re.escape(fn), args=re.escape(args_name)))
            for f, t in texts.items():
                if f.startswith(folder) and f.endswith(ext) and "/" not in f[len(folder):] and rx.search(t):
                    shorts.add(os.path.basename(f)[: -len(ext)])
        # One name per operation: every module that defines a piece of it carries the table's stem.
        missing = [f.format(s=stem) for f in STEM_FILES if f.format(s=stem) not in texts]
        if missing or shorts != {stem}:
            failed = True
            print(f"{fn}: stem {stem!r} (op_table.hpp) but defining modules {sorted(shorts)}, missing {missing}")
        names = [word(fn), word(args_name)]
        names += [r"(?<![A-Za-z0-9_])" + re.escape(s) + r"(?:_properties)?\.[A-Za-z]+\b" for s in sorted(shorts)]
        rx = re.compile("|".join(names))
        hits = sorted(f for f, t in texts.items() if rx.search(t) or rx.search(f))
        limit = CEILINGS.get(fn, LIMIT)
        over = len(hits) > limit
        failed = failed or over
        print(f"{fn:<40} {len(hits):>5} {limit:>5}  {', '.join(sorted(shorts))}{'   OVER THE LIMIT' if over else ''}")
        if over or show == fn:
            for f in hits:
                print("    " + f)
        elif fn in CEILINGS and len(hits) < limit:
            print(f"    (below its ceiling: CEILINGS[{fn!r}] in {os.path.relpath(__file__, root)} can be lowered to {len(hits)})")
    print(f"op_footprint: {'FAILED' if failed else 'passed'} ({len(texts)} code files under {root})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
