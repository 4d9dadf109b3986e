"""The operations as PyTorch operators: ``torch.ops.dsv4kv.<name>``.

Registered with ``torch.library.Library`` from the operation table, so a new operation needs
no edit here. For each operation:

* the schema has the Python function's positional arguments (minus combine's ``out`` pair),
  in its order and with its defaults; the tensors it writes in place (``k_cache``, ``out``)
  are declared mutable (``Tensor(a!)``), and ``error_count`` is a keyword-only mutable
  ``Tensor(e!)? error_count=None``;
* an operation that allocates outputs (the index builders) returns them, and has a second
  overload ``<name>.out`` taking them as keyword-only mutable arguments (``out=`` of the
  Python function);
* CPU and CUDA kernels call the extension directly: each tensor crosses as a DLPack capsule
  (``torch._C._to_dlpack``, no Python-level ``__dlpack__``), CUDA work runs on the current
  stream of the tensors' device (the extension makes that device current for the launch);
* a fake kernel (shapes only) lets ``torch.compile`` and FakeTensor trace every operator.

Why not ``torch.library.custom_op``: its Python wrapper layers cost several microseconds
per eager call, and the ops here are host-bound for small batches. The raw Library keeps one
C++ dispatcher hop plus one generated Python kernel (bench/host_cost.py measures it).
"""

from __future__ import annotations

from typing import Any, Dict, List

import torch

from . import _ext, _opspec, ops

NAMESPACE = "dsv4kv"
_LIB = torch.library.Library(NAMESPACE, "DEF")
_to_dlpack = torch._C._to_dlpack
_INT32 = torch.int32
_SCHEMA_TYPES = {"int": "int", "int?": "int?", "bool": "bool"}


def _default(value: Any) -> str:
    return "" if value is ... else "=" + ("None" if value is None else str(value))


def _schema_args(spec: _opspec.OpSpec) -> List[str]:
    """The positional part of the schema: one entry per Python parameter that is a field."""
    args, alias = [], iter("abcdfghijklmnopqrstuvwxyz")
    for p in spec.params:
        kind = spec.kinds.get(p.name)
        if kind is None:  # combine's out=(indices, lens): the .out overload takes the pair
            continue
        default = ... if p.default is p.empty else p.default
        if kind == "tensor":
            opt = "?" if p.name in spec.optional else ""
            mut = f"({next(alias)}!)" if spec.roles[p.name] in ("out", "inout") else ""
            args.append(f"Tensor{mut}{opt} {p.name}{_default(default)}")
        else:
            args.append(f"{_SCHEMA_TYPES[kind]} {p.name}{_default(default)}")
    return args


def schemas(spec: _opspec.OpSpec) -> Dict[str, str]:
    """{overload: schema} of one operation ("" = the default overload)."""
    args = _schema_args(spec)
    counter = "Tensor(e!)? error_count=None"
    if not spec.returned:
        return {"": f"({', '.join(args)}, *, {counter}) -> ()"}
    ret = ", ".join("Tensor" for _ in spec.returned)
    outs = [f"Tensor({chr(ord('s') + i)}!) {name}" for i, name in enumerate(spec.returned)]
    return {
        "": f"({', '.join(args)}, *, {counter}) -> ({ret})",
        "out": f"({', '.join(args)}, *, {', '.join(outs)}, {counter}) -> ()",
    }


def _make_kernel(spec: _opspec.OpSpec, cuda: bool, allocate: bool):
    """Generates the kernel of one operation as straight-line Python (one call, no loops):
    the schema's arguments in, the extension binding called with every field in struct
    order, the stream of the `like` tensor's device."""
    params = [p.name for p in spec.params if p.name in spec.kinds]
    # The dispatcher leaves out trailing arguments equal to their schema default: the kernel
    # carries the same defaults.
    defaults = {p.name: p.default for p in spec.params if p.name in spec.kinds and p.default is not p.empty}
    header = [f"{n}={defaults[n]!r}" if n in defaults else n for n in params]
    kwonly = ([] if allocate else list(spec.returned)) + ["error_count=None"]
    body = []
    if allocate:
        body.append(f"    __outs = __shapes(dict({', '.join(f'{n}={n}' for n in params)}))")
        for i, name in enumerate(spec.returned):
            body.append(f"    {name} = __empty(__outs[{i}], dtype=__int32, device={spec.like}.device)")
    if cuda:
        body.append(f"    __s = __stream({spec.like}.get_device())")
    else:
        body.append("    __s = 0")
    call = []
    for name, _, kind in spec.fields:
        if kind in ("tensor", "counter"):
            if name in spec.optional or kind == "counter":
                call.append(f"None if {name} is None else __dl({name})")
            else:
                call.append(f"__dl({name})")
        else:
            call.append(name)
    body.append(f"    __ext({', '.join(call)}, __s)")
    if allocate:
        body.append(f"    return {', '.join(spec.returned)},")
    src = f"def kernel({', '.join(header)}, *, {', '.join(kwonly)}):\n" + "\n".join(body) + "\n"
    env = {
        "__dl": _to_dlpack,
        "__ext": getattr(_ext, spec.name),
        "__shapes": lambda v: spec.shapes(v),
        "__empty": torch.empty,
        "__int32": _INT32,
        "__stream": torch._C._cuda_getCurrentRawStream if cuda else None,
    }
    exec(compile(src, f"<dsv4kv kernel {spec.name}>", "exec"), env)
    return env["kernel"]


def _make_fake(spec: _opspec.OpSpec, allocate: bool):
    params = [p.name for p in spec.params if p.name in spec.kinds]

    defaults = {p.name: p.default for p in spec.params if p.name in spec.kinds and p.default is not p.empty}

    def fake(*args, **kwargs):
        if not allocate:
            return None
        values = dict(defaults)
        values.update(zip(params, args))
        like = values[spec.like]
        return tuple(torch.empty(shape, dtype=_INT32, device=like.device) for shape in spec.shapes(values))

    return fake


def _register(spec: _opspec.OpSpec) -> None:
    for overload, schema in schemas(spec).items():
        qual = spec.name + ("." + overload if overload else "")
        _LIB.define(qual + schema)
        allocate = overload == "" and bool(spec.returned)
        _LIB.impl(qual, _make_kernel(spec, cuda=False, allocate=allocate), "CPU")
        _LIB.impl(qual, _make_kernel(spec, cuda=True, allocate=allocate), "CUDA")
        torch.library.register_fake(f"{NAMESPACE}::{qual}", _make_fake(spec, allocate), lib=_LIB)


SPECS = {name: _opspec.spec(getattr(ops, name)) for name in _ext.ops}
for _spec in SPECS.values():
    _register(_spec)


def _route(spec: _opspec.OpSpec, values: Dict[str, Any]):
    """Runs one dsv4kv.* call through torch.ops.dsv4kv when all its arrays are torch
    tensors; NotImplemented otherwise (NumPy, CuPy, mixed: the direct DLPack path)."""
    Tensor = torch.Tensor
    for name in spec.array_fields:
        if name in spec.returned:
            continue
        v = values.get(name)
        if v is None:
            if name != "error_count" and name not in spec.optional:
                return NotImplemented  # a missing required array: the extension's contract message
        elif not isinstance(v, Tensor):
            return NotImplemented
    args = [values[p.name] if spec.kinds[p.name] == "tensor" else spec.scalar(p.name, values[p.name])
            for p in spec.params if p.name in spec.kinds]
    packet = getattr(torch.ops.dsv4kv, spec.name)
    ec = values.get("error_count")
    if not spec.returned:
        packet(*args, error_count=ec)
        return None
    out = values.get("out")
    if out is None:
        return packet(*args, error_count=ec)
    outs = spec.outputs(values)
    arrays = [outs[name] for name in spec.returned]
    if not all(isinstance(a, Tensor) for a in arrays):
        return NotImplemented
    packet.out(*args, **dict(zip(spec.returned, arrays)), error_count=ec)
    return tuple(arrays)


ops._torch_route = _route
