#!/usr/bin/env python3
"""Writes conformance/golden/sparse_gather.safetensors: golden vectors of
dequantize_and_gather_k_cache_sparse measured on a GPU from the Triton kernel of
bench/triton_bench.py (`_sparse_gather_row_kernel`, the transcription of vLLM PR #42504's Triton
fallback: one program per output row, num_warps=1).

Usage (GPU machine with CUDA, torch, Triton and numpy; from the repository root; --bench-bin names the
dsv4kv_bench binary, default .carry/dsv4kv_bench, whose --layout-json gives the spec's layout constants):
    python3 bench/make_golden_sparse_gather.py --out conformance/golden/sparse_gather.safetensors

Dry run without a GPU (numpy, ml_dtypes and the dsv4kv package): --standin computes every output
with the library's reference instead, for testing the replay. Its file says so in its metadata
(`set` = `standin`) and is never written under conformance/golden.

What goes in (conformance/golden/README.md, "sparse_gather.safetensors", lists every case):
* caches of uniform random bytes (every scale byte 0..255 and every code is a valid input), a
  cache whose tokens hold every (scale byte, code) pair, and caches shaped like quantized ones
  (scale bytes around 127, zero pad bytes, finite codes, bf16 RoPE values) over the init
  pattern; the gather reads bytes, so how they were written does not matter;
* block sizes 64, 128, 32, 16, 7 and 1; vLLM's block strides, the minimum block_size * 584, and
  even strides that are not multiples of 4 (the minimum plus 2 or 6);
* int32 and int64 slot lists with -1 padding, slots across blocks, the first and the last slot of
  the cache, repeated slots, an empty list and a list of padding only;
* `out` rows with row strides of 512 and more, starting at an offset of the storage that is
  2-byte but not 4-byte aligned, with rows past the slot list (left untouched).
Slots below -1 and slots past the cache's capacity are left out: there the spec's deviation table
(spec/operations.md) departs from vLLM PR #42504 (the spec skips and reports them).

Each case runs twice on fresh outputs; the two runs must give the same bytes and no report, or
the script stops. `caseNNN.ref_match` = 1 when an independent re-derivation matches the kernel:
each row rebuilt from conformance/golden/dequantize_table.safetensors (the dense gather kernel's
bf16 output for every scale byte and code) and the RoPE bits of the cache. The layout constants
come from `dsv4kv_bench --layout-json` (triton_bench.bench_layout); nothing here restates them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import struct
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
OP = "dequantize_and_gather_k_cache_sparse"
GENERATOR = "bench/make_golden_sparse_gather.py"
KERNEL = ("bench/triton_bench.py _sparse_gather_row_kernel (vLLM PR #42504's Triton fallback: "
          "one program per output row, num_warps=1)")


#: The spec's layout constants, as `dsv4kv_bench --layout-json` prints them (triton_bench.bench_layout);
#: set by main() before any case is built.
L: dict = {}


def min_stride(bs: int) -> int:
    return bs * L["token_bytes"]


def vllm_stride(bs: int) -> int:
    r = L["vllm_block_rounding"]
    return (min_stride(bs) + r - 1) // r * r


def init_pattern(n: int, salt: int) -> np.ndarray:
    """conformance/golden/README.md: init_byte(i) = (i * 131 + 17 + init_salt) mod 251."""
    i = np.arange(n, dtype=np.uint64)
    return ((i * np.uint64(131) + np.uint64(17) + np.uint64(salt)) % np.uint64(251)).astype(np.uint8)


# ---------------------------------------------------------------------------
# safetensors, as conformance/golden/README.md describes it
# ---------------------------------------------------------------------------
_ST = {np.dtype(np.uint8): "U8", np.dtype(np.int32): "I32", np.dtype(np.int64): "I64", np.dtype(np.bool_): "BOOL"}


def write_safetensors(path: Path, tensors: dict, meta: dict) -> None:
    """tensors: name -> numpy array, or (\"BF16\", uint16 array) for raw bfloat16 bits."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        v = tensors[name]
        dt, a = v if isinstance(v, tuple) else (_ST[v.dtype], v)
        b = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def read_safetensors_tensor(path: Path, name: str) -> np.ndarray:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    info = json.loads(raw[8:8 + n])[name]
    b, e = info["data_offsets"]
    dt = {"BF16": np.uint16, "U8": np.uint8, "I32": np.int32, "I64": np.int64}[info["dtype"]]
    return np.frombuffer(raw[8 + n + b:8 + n + e], dtype=np.dtype(dt).newbyteorder("<")).reshape(info["shape"])


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------
def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (the values are finite)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def shaped_cache(rng, bs: int, stride: int, nb: int, salt: int) -> np.ndarray:
    """A cache shaped like one a quantize call wrote: over the init pattern, 3/4 of the tokens
    (chosen at random) hold scale bytes around 127 (2^-20 .. 2^20), a zero pad byte, codes of
    finite values of every magnitude (0x7F and 0xFF, the NaN codes, left out) and RoPE values
    drawn from N(0, 1) in bf16; the other tokens keep the pattern's bytes."""
    cache = init_pattern(nb * stride, salt).reshape(nb, stride)
    cap = nb * bs
    for slot in rng.permutation(cap)[: (3 * cap) // 4]:
        blk, pos = divmod(int(slot), bs)
        data = pos * L["token_data_bytes"]
        codes = rng.integers(0, 0x7F, size=L["nope_dim"]) | (rng.integers(0, 2, size=L["nope_dim"]) << 7)
        cache[blk, data:data + L["nope_dim"]] = codes
        rope = bf16_bits(rng.standard_normal(L["rope_dim"]).astype(np.float32)).astype("<u2")
        cache[blk, data + L["nope_dim"]:data + L["token_data_bytes"]] = rope.view(np.uint8)
        scales = bs * L["token_data_bytes"] + pos * L["scale_bytes_per_token"]
        cache[blk, scales:scales + L["num_tiles"]] = rng.integers(107, 148, size=L["num_tiles"])
        cache[blk, scales + L["num_tiles"]:scales + L["scale_bytes_per_token"]] = 0
    return cache


def table_cache(rng, bs: int, stride: int, nb: int):
    """A cache of random bytes whose first tokens hold every (scale byte, code) pair once: pair p =
    s * 256 + code lies in tile g = p // 64 (one scale byte, 64 consecutive codes), tile g is tile
    g % num_tiles of token g // num_tiles. Returns (cache, number of such tokens)."""
    cache = rng.integers(0, 256, size=(nb, stride), dtype=np.uint8)
    tiles_needed = 256 * 256 // L["tile_size"]
    tokens = -(-tiles_needed // L["num_tiles"])
    assert tokens <= nb * bs
    for g in range(tokens * L["num_tiles"]):
        p = (g % tiles_needed) * L["tile_size"]  # the last token's spare tiles repeat the first pairs
        tok, j = divmod(g, L["num_tiles"])
        blk, pos = divmod(tok, bs)
        at = pos * L["token_data_bytes"] + j * L["tile_size"]
        cache[blk, at:at + L["tile_size"]] = np.arange(p, p + L["tile_size"]) % 256
        cache[blk, bs * L["token_data_bytes"] + pos * L["scale_bytes_per_token"] + j] = p // 256
    return cache, tokens


def cases() -> list[dict]:
    """Every case: block size, block stride, blocks, cache kind, slot dtype, out row stride, out offset
    (elements), rows past the slot list, and the slot list's recipe."""
    return [
        dict(bs=64, stride=vllm_stride(64), nb=3, cache="table", dtype=np.int32, row=512, off=0, extra=0,
             slots="table", desc="every (scale byte, code) pair: the table tokens in shuffled order, 8 padding entries"),
        dict(bs=64, stride=vllm_stride(64), nb=4, cache="raw", dtype=np.int64, row=520, off=0, extra=3,
             slots="mixed", n=96, desc="random bytes; slots across blocks, first and last slot, repeats, -1"),
        dict(bs=64, stride=min_stride(64) + 6, nb=3, cache="shaped", dtype=np.int32, row=512, off=5, extra=0,
             slots="mixed", n=80, desc="a cache shaped like a quantized one; stride 64*584+6; out at element 5"),
        dict(bs=128, stride=vllm_stride(128), nb=2, cache="shaped", dtype=np.int32, row=1024, off=0, extra=2,
             slots="mixed", n=64, desc="block size 128 (positions >= 64), shaped cache, wide rows"),
        dict(bs=16, stride=min_stride(16) + 2, nb=6, cache="raw", dtype=np.int64, row=768, off=3, extra=1,
             slots="mixed", n=64, desc="block size 16, stride 16*584+2, out at element 3"),
        dict(bs=32, stride=min_stride(32), nb=4, cache="shaped", dtype=np.int64, row=600, off=0, extra=0,
             slots="few", n=64, desc="block size 32, minimal stride; 64 entries drawn from 5 slots"),
        dict(bs=7, stride=min_stride(7), nb=12, cache="raw", dtype=np.int32, row=514, off=1, extra=2,
             slots="mixed", n=48, desc="odd block size 7, minimal stride, row stride 514, out at element 1"),
        dict(bs=1, stride=min_stride(1), nb=32, cache="raw", dtype=np.int64, row=512, off=0, extra=0,
             slots="mixed", n=40, desc="block size 1: one token per block"),
        dict(bs=64, stride=vllm_stride(64), nb=1, cache="raw", dtype=np.int32, row=512, off=0, extra=4,
             slots="empty", desc="empty slot list: nothing is written"),
        dict(bs=64, stride=vllm_stride(64), nb=1, cache="raw", dtype=np.int64, row=512, off=0, extra=1,
             slots="padding", n=16, desc="padding only: nothing is written"),
    ]


def slot_list(rng, spec: dict, table_tokens: int) -> np.ndarray:
    cap = spec["nb"] * spec["bs"]
    kind = spec["slots"]
    if kind == "table":
        s = list(rng.permutation(table_tokens))
        for _ in range(8):
            s.insert(int(rng.integers(0, len(s) + 1)), -1)
    elif kind == "mixed":
        n, pad = spec["n"], spec["n"] // 8
        s = list(rng.integers(0, cap, size=n - 8 - pad))
        s += [0, cap - 1, spec["bs"] - 1, min(spec["bs"], cap - 1)]  # first, last, a block's edges
        s += [s[0], s[0], s[1], s[2]]  # repeats
        s = rng.permutation(np.array(s + [-1] * pad, dtype=np.int64))
    elif kind == "few":
        pool = rng.choice(cap, size=5, replace=False)
        s = list(rng.choice(np.append(pool, -1), size=spec["n"]))
    elif kind == "empty":
        s = []
    elif kind == "padding":
        s = [-1] * spec["n"]
    else:
        raise ValueError(kind)
    a = np.array(s, dtype=np.int64)
    assert ((a == -1) | ((a >= 0) & (a < cap))).all()  # no slot the deviation table covers
    return a.astype(spec["dtype"])


# ---------------------------------------------------------------------------
# The kernels: Triton on the GPU, or the library's reference for a stand-in
# ---------------------------------------------------------------------------
class Triton:
    def __init__(self, triton_bench):
        import torch
        import triton

        if not torch.cuda.is_available():
            sys.exit("make_golden_sparse_gather: no CUDA device (use --standin for a dry run)")
        self.torch, self.bench = torch, triton_bench
        self.meta = {"torch": torch.__version__, "triton": triton.__version__,
                     "gpu": torch.cuda.get_device_name(), "set": "public", "kernel": KERNEL}

    def gather(self, storage: np.ndarray, rows: int, row: int, off: int, cache: np.ndarray,
               slots: np.ndarray, bs: int):
        torch = self.torch
        buf = torch.from_numpy(storage.view(np.int16)).cuda().view(torch.bfloat16)
        out = torch.as_strided(buf[off:], (rows, L["head_dim"]), (row, 1))
        err = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.bench.dequantize_and_gather_k_cache_sparse_triton(
            out, torch.from_numpy(cache).cuda(), torch.from_numpy(slots).cuda(), bs, L, error_count=err)
        torch.cuda.synchronize()
        return buf.view(torch.int16).cpu().numpy().view(np.uint16), int(err.item())


class Standin:
    def __init__(self):
        import dsv4kv
        import ml_dtypes

        self.dsv4kv, self.bf16 = dsv4kv, ml_dtypes.bfloat16
        self.meta = {"set": "standin", "kernel": "the dsv4kv reference (a stand-in, not a measurement)"}

    def gather(self, storage, rows, row, off, cache, slots, bs):
        buf = storage.copy().view(self.bf16)
        item = buf.dtype.itemsize
        out = np.lib.stride_tricks.as_strided(buf[off:], (rows, L["head_dim"]), (row * item, item))
        err = np.zeros(1, np.int32)
        self.dsv4kv.dequantize_and_gather_k_cache_sparse(out, cache, slots, bs, error_count=err)
        return buf.view(np.uint16), int(err[0])


def rederive(table: np.ndarray, storage: np.ndarray, rows: int, row: int, off: int, cache: np.ndarray,
             slots: np.ndarray, bs: int) -> np.ndarray:
    """The expected storage from the dense gather's measured table and the cache's RoPE bytes."""
    out = storage.copy()
    nope, tile = L["nope_dim"], L["tile_size"]
    for i, s in enumerate(slots.astype(np.int64)):
        if s == -1:
            continue
        blk, pos = divmod(int(s), bs)
        data = cache[blk, pos * L["token_data_bytes"]:(pos + 1) * L["token_data_bytes"]]
        scales = cache[blk, bs * L["token_data_bytes"] + pos * L["scale_bytes_per_token"]:][:L["num_tiles"]]
        at = off + i * row
        out[at:at + nope] = table[np.repeat(scales, tile), data[:nope]]
        out[at + nope:at + L["head_dim"]] = data[nope:].view("<u2")
    return out


def build(kernels, seed: int):
    rng = np.random.default_rng(seed)
    table = read_safetensors_tensor(REPO / "conformance/golden/dequantize_table.safetensors", "case000.table")
    tensors, meta, mismatches = {}, {}, []
    for idx, spec in enumerate(cases()):
        c = f"case{idx:03d}"
        bs, stride, nb = spec["bs"], spec["stride"], spec["nb"]
        assert stride % 2 == 0 and stride >= min_stride(bs)
        table_tokens = 0
        if spec["cache"] == "raw":
            cache = rng.integers(0, 256, size=(nb, stride), dtype=np.uint8)
        elif spec["cache"] == "table":
            cache, table_tokens = table_cache(rng, bs, stride, nb)
        else:
            cache = shaped_cache(rng, bs, stride, nb, 1000 + idx)
        slots = slot_list(rng, spec, table_tokens)
        n = len(slots)
        rows, row, off = n + spec["extra"], spec["row"], spec["off"]
        salt = 7 + idx
        numel = off + rows * row + 3  # a few elements after the last row's padding
        before = init_pattern(2 * numel, salt).view("<u2")

        first, err1 = kernels.gather(before, rows, row, off, cache, slots, bs)
        second, err2 = kernels.gather(before, rows, row, off, cache, slots, bs)
        if not np.array_equal(first, second) or err1 != err2:
            sys.exit(f"make_golden_sparse_gather: {c}: two runs gave different bytes")
        if err1 != 0:
            sys.exit(f"make_golden_sparse_gather: {c}: the kernel reported {err1} slots (expected none)")
        ref_match = np.array_equal(rederive(table, before, rows, row, off, cache, slots, bs), first)
        if not ref_match:
            mismatches.append(c)

        tensors[f"{c}.k_cache"] = cache
        tensors[f"{c}.slot_indices"] = slots
        tensors[f"{c}.out_after"] = ("BF16", first)
        params = {"block_size": bs, "use_fnuz": 0, "init_salt": salt, "error_count": 0, "out_offset": off,
                  "out_dim0": rows, "out_dim1": L["head_dim"], "out_stride0": row, "out_stride1": 1}
        for k, v in params.items():
            tensors[f"{c}.param.{k}"] = np.array([v], dtype=np.int64)
        meta[f"{c}.desc"] = (f"{spec['desc']} | bs={bs} stride={stride} blocks={nb} cache={spec['cache']} "
                             f"slots={np.dtype(spec['dtype']).name} N={n} out rows={rows} row_stride={row} "
                             f"offset={off}")
        meta[f"{c}.ref_match"] = int(ref_match)
    return tensors, meta, mismatches


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the .safetensors file to write")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bench-bin", default=".carry/dsv4kv_bench",
                    help="dsv4kv_bench binary: source of the layout constants (--layout-json)")
    ap.add_argument("--standin", action="store_true",
                    help="no GPU: outputs from the dsv4kv reference, for testing the replay (never committed)")
    a = ap.parse_args()
    out = Path(a.out).resolve()
    if a.standin and (REPO / "conformance/golden").resolve() in out.parents:
        sys.exit("make_golden_sparse_gather: a stand-in is not written under conformance/golden")
    sys.path.insert(0, str(REPO / "bench"))
    import triton_bench  # its Triton kernel is the one measured; it imports without Triton too

    L.update(triton_bench.bench_layout(a.bench_bin))
    kernels = Standin() if a.standin else Triton(triton_bench)
    tensors, meta, mismatches = build(kernels, a.seed)
    num_cases = len(cases())
    header = {"format": "dsv4kv-golden-v1", "op": OP, "layout": "fields", "seed": a.seed, "generator": GENERATOR,
              "date": datetime.date.today().isoformat(), "num_cases": num_cases, "runs": "2 (identical)"}
    header.update(kernels.meta)
    header.update(meta)
    write_safetensors(out, tensors, header)
    print(f"make_golden_sparse_gather: wrote {out} ({out.stat().st_size} bytes, {num_cases} cases, "
          f"set {header['set']})")
    if mismatches:
        print(f"make_golden_sparse_gather: ref_match = 0 for {', '.join(mismatches)}: the kernel's bytes differ "
              "from the dense gather's table (kept as measured; the replay will report them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
