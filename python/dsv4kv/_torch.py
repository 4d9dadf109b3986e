"""The operations as PyTorch operators: ``torch.ops.dsv4kv.<name>``.

Registered with ``torch.library.Library`` from the operation table, so a new operation needs
no edit here. For each operation:

* the schema has the Python function's positional arguments (minus an ``out=`` tuple of preallocated outputs),
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
C++ dispatcher hop plus one generated Python kernel (bench/host_cost.py measures it; see
bench/RESULTS.md#host-cost).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

import torch
import torch.utils.dlpack

from . import _arrays, _ext, _opspec, ops

NAMESPACE = "dsv4kv"
_LIB = torch.library.Library(NAMESPACE, "DEF")
if not hasattr(torch.library, "register_fake"):
    raise ImportError(f"torch {torch.__version__} has no torch.library.register_fake (needs torch >= 2.4)")
# The C entry point of torch.utils.dlpack.to_dlpack (no Python-level __dlpack__ wrapper).
_to_dlpack = getattr(torch._C, "_to_dlpack", None) or torch.utils.dlpack.to_dlpack
_INT32 = torch.int32
_SCHEMA_TYPES = {"int": "int", "int?": "int?", "bool": "bool", "str": "str"}


def _load_fast():
    """dsv4kv._torch_ext (src/torch_ext.cpp), the eager fast path: built only where torch was
    importable when the package was built, and used only with that same torch (it reads torch's
    C++ tensors directly). None when absent, built for another torch, or DSV4KV_TORCH_FAST=0."""
    if os.environ.get("DSV4KV_TORCH_FAST", "") in ("0",):
        return None
    try:
        from . import _torch_ext
    except ImportError:
        return None
    if getattr(_torch_ext, "torch_version", None) != torch.__version__:
        return None
    return _torch_ext


_arrays._tensor_type = torch.Tensor
#: The compiled fast path, or None (then every call takes the DLPack route).
_FAST = _load_fast()
#: True only while Dynamo traces (it folds the call); a plain `return False` in eager mode.
_dynamo_compiling = getattr(torch.compiler, "is_dynamo_compiling", None) or torch.compiler.is_compiling


def _default(value: Any) -> str:
    if value is ...:
        return ""
    if isinstance(value, str):
        return f"='{value}'"  # the profile names are plain identifiers
    return "=" + ("None" if value is None else str(value))


def _pos(spec: _opspec.OpSpec) -> List[str]:
    """Names of the schema's positional arguments: the Python positional parameters that are fields."""
    return [p.name for p in spec.params if p.name in spec.kinds]


def _kw(spec: _opspec.OpSpec) -> List[str]:
    """Names of the schema's keyword-only field arguments (before the outputs and error_count)."""
    return [p.name for p in spec.kwparams]


def _defaults(spec: _opspec.OpSpec) -> Dict[str, Any]:
    return {p.name: p.default for p in spec.params + spec.kwparams
            if p.name in spec.kinds and p.default is not p.empty}


def _schema_args(spec: _opspec.OpSpec, params, alias) -> List[str]:
    """Schema entries, one per Python parameter in `params` that is a field (`alias`: the
    iterator of alias letters for mutable tensors, shared by one schema)."""
    args = []
    for p in params:
        kind = spec.kinds.get(p.name)
        if kind is None:  # an out=(...) tuple of preallocated outputs: the .out overload takes them
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
    alias = iter("abcdfghijklmnopqr")
    args = _schema_args(spec, spec.params, alias)
    kw = _schema_args(spec, spec.kwparams, alias)
    counter = ["Tensor(e!)? error_count=None"]
    if not spec.returned:
        return {"": f"({', '.join(args + ['*'] + kw + counter)}) -> ()"}
    ret = ", ".join("Tensor" for _ in spec.returned)
    outs = [f"Tensor({chr(ord('s') + i)}!) {name}" for i, name in enumerate(spec.returned)]
    return {
        "": f"({', '.join(args + ['*'] + kw + counter)}) -> ({ret})",
        "out": f"({', '.join(args + ['*'] + kw + outs + counter)}) -> ()",
    }


def _fast_args(spec: _opspec.OpSpec, names: Dict[str, str]) -> str:
    """The fields of `spec` in struct order as source text for a call of _torch_ext.<name>:
    each field's own variable, unless `names` maps it to another expression."""
    return ", ".join(names.get(name, name) for name, _, _ in spec.fields)


def _make_kernel(spec: _opspec.OpSpec, cuda: bool, allocate: bool, fast: bool = True):
    """Generates the kernel of one operation as straight-line Python (one call, no loops):
    the schema's arguments in, the compiled fast path (dsv4kv._torch_ext) when `fast` and
    built, else (or when it declines) the extension binding called with every field in struct
    order, each tensor as a DLPack capsule, on the stream of the `like` tensor's device."""
    params, kws = _pos(spec), _kw(spec)
    # The dispatcher leaves out arguments equal to their schema default: the kernel carries
    # the same defaults.
    defaults = _defaults(spec)
    header = [f"{n}={defaults[n]!r}" if n in defaults else n for n in params]
    kwonly = ([f"{n}={defaults[n]!r}" if n in defaults else n for n in kws]
              + ([] if allocate else list(spec.returned)) + ["error_count=None"])
    body = []
    if allocate:
        body.append(f"    __outs = __shapes(dict({', '.join(f'{n}={n}' for n in params + kws)}))")
    if fast and _FAST is not None:
        # The compiled path first (it declines, returning NotImplemented, whatever it cannot run).
        fields = _fast_args(spec, {n: "None" for n in spec.returned} if allocate else {})
        body.append(f"    __r = __fast({fields}, {'__outs' if allocate else 'None'}, False)")
        body.append("    if __r is not NotImplemented: return __r")
    if allocate:
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
        "__fast": getattr(_FAST, spec.name, None),
        "__dl": _to_dlpack,
        "__ext": getattr(_ext, spec.name),
        "__shapes": lambda v: spec.shapes(v),
        "__empty": torch.empty,
        "__int32": _INT32,
        # absent from CPU-only torch builds, which have no CUDA tensors to run this kernel on
        "__stream": getattr(torch._C, "_cuda_getCurrentRawStream", None) if cuda else None,
    }
    exec(compile(src, f"<dsv4kv kernel {spec.name}>", "exec"), env)
    return env["kernel"]


def _make_fake(spec: _opspec.OpSpec, allocate: bool):
    params, kws, defaults = _pos(spec), set(_kw(spec)), _defaults(spec)

    def fake(*args, **kwargs):
        if not allocate:
            return None
        values = dict(defaults)
        values.update(zip(params, args))
        values.update((k, v) for k, v in kwargs.items() if k in kws)
        like = values[spec.like]
        return tuple(torch.empty(shape, dtype=_INT32, device=like.device) for shape in spec.shapes(values))

    return fake


_KERNELS: Dict[tuple, Any] = {}  # (op, overload, device type) -> the kernel registered for it


def _register(spec: _opspec.OpSpec) -> None:
    for overload, schema in schemas(spec).items():
        qual = spec.name + ("." + overload if overload else "")
        _LIB.define(qual + schema)
        allocate = overload == "" and bool(spec.returned)
        for key, cuda in (("CPU", False), ("CUDA", True)):
            kernel = _make_kernel(spec, cuda=cuda, allocate=allocate)
            _LIB.impl(qual, kernel, key)
            _KERNELS[(spec.name, overload, cuda)] = kernel
        torch.library.register_fake(f"{NAMESPACE}::{qual}", _make_fake(spec, allocate), lib=_LIB)


# Operations of the table that have their public function in dsv4kv/ops.py (test_package checks
# that every one has).
SPECS = {name: _opspec.spec(getattr(ops, name)) for name in _ext.ops if hasattr(ops, name)}
for _spec in SPECS.values():
    _register(_spec)


_Tensor = torch.Tensor
#: DSV4KV_TORCH_DISPATCH=1: eager calls go through the dispatcher too (see _make_route).
_ALWAYS_DISPATCH = os.environ.get("DSV4KV_TORCH_DISPATCH", "") not in ("", "0")


def _make_route(spec: _opspec.OpSpec, fast: bool = True):
    """Generates the torch route of one operation as straight-line Python: route(values)
    runs the call (values = the public function's parameters by name) as torch.ops.dsv4kv.<name> when
    all its arrays are torch tensors, else returns NotImplemented (NumPy, CuPy, mixed, a
    missing required array: the direct DLPack path, which reports contract errors).

    Eager shortcut: with plain tensors, outside torch.compile tracing and with no torch
    function/dispatch mode active, nothing between the dispatcher and the kernel could act
    (no autograd formula, no functionalization, no fake or proxy tensors), so the kernel the
    dispatcher would pick (by the tensors' device) is called directly: the dispatcher hop
    costs more host time than the kernel (bench/host_cost.py, rows dsv4kv vs torch.ops).
    Under torch.compile the call is traced as the operator (the fullgraph tests prove it).

    Compiled fast path (`fast`, where dsv4kv._torch_ext is built): tried first in eager mode;
    fast=False gives the route without it, whose kernels are the DLPack ones (bench/host_cost.py
    compares the two)."""
    params, kws = _pos(spec), _kw(spec)
    lines = ["def route(values):"]
    if fast and _FAST is not None and not _ALWAYS_DISPATCH:
        # The compiled fast path (dsv4kv._torch_ext) first, outside Dynamo's tracing: it checks
        # the same conditions as the eager shortcut below (plain tensors, no mode) and declines
        # (NotImplemented) anything else, which then takes the route below. Other tracers
        # (make_fx, AOT autograd, non-strict export) run with fake or proxy tensors under a
        # dispatch mode, which it declines; so Dynamo's check is enough here, and it costs
        # 0.03 us against 0.27 for torch.compiler.is_compiling() (measured, torch 2.15).
        lines.append("    if not _dynamo_compiling():")
        fields = {name: f"values[{name!r}]" for name, _, _ in spec.fields if name not in spec.returned}
        if spec.returned:
            n = len(spec.returned)
            alloc = _fast_args(spec, {**fields, **{o: "None" for o in spec.returned}})
            given = _fast_args(spec, {**fields, **{o: f"out[{i}]" for i, o in enumerate(spec.returned)}})
            lines.append("        out = values['out']")
            lines.append("        if out is None:")
            # shapes None: the C++ side applies the spec's shape rule and allocates the outputs
            # together (python/src/torch_ext.cpp says why); it declines where that rule gives none.
            lines.append(f"            r = _fast({alloc}, None, True)")
            lines.append("            if r is not NotImplemented: return r")
            lines.append(f"        elif (type(out) is tuple or type(out) is list) and len(out) == {n}:")
            lines.append(f"            if _fast({given}, None, True) is None: return {', '.join(f'out[{i}]' for i in range(n))},")
        else:
            lines.append(f"        if _fast({_fast_args(spec, fields)}, None, True) is None: return None")
    lines.append("    plain = True")

    def check(name, required):
        lines.append(f"    {name} = values[{name!r}]")
        if required:
            lines.append(f"    if {name} is None: return NotImplemented")
            lines.append(f"    if type({name}) is not _T:")
        else:
            lines.append(f"    if {name} is not None and type({name}) is not _T:")
        lines.append(f"        if not isinstance({name}, _T): return NotImplemented")
        lines.append("        plain = False")

    for name in params + kws:
        kind = spec.kinds[name]
        if kind == "tensor":
            check(name, name not in spec.optional)
        elif kind == "int":
            lines.append(f"    {name} = _as_int({spec.name!r}, {name!r}, values[{name!r}])")
        elif kind == "int?":
            lines.append(f"    {name} = values[{name!r}]")
            lines.append(f"    if {name} is not None: {name} = _as_int({spec.name!r}, {name!r}, {name})")
        elif kind == "str":
            lines.append(f"    {name} = _as_str({spec.name!r}, {name!r}, values[{name!r}])")
        else:
            lines.append(f"    {name} = bool(values[{name!r}])")
    check("error_count", False)
    call = ", ".join(params + [f"{n}={n}" for n in kws])
    shortcut = "plain and not _ALWAYS and not _compiling() and not _dmodes() and not _fmodes()"
    dev = f"{spec.like}.is_cuda"
    if spec.returned:
        lines.append("    out = values['out']")
        lines.append("    if out is None:")
        lines.append(f"        if {shortcut}: return (_k_cuda if {dev} else _k_cpu)({call}, error_count=error_count)")
        lines.append(f"        return _packet({call}, error_count=error_count)")
        lines.append("    outs = _spec.outputs(values)")
        lines.append("    for o in outs.values():")
        lines.append("        if type(o) is not _T:")
        lines.append("            if not isinstance(o, _T): return NotImplemented")
        lines.append("            plain = False")
        lines.append(f"    if {shortcut}: (_ko_cuda if {dev} else _ko_cpu)({call}, **outs, error_count=error_count)")
        lines.append(f"    else: _packet.out({call}, **outs, error_count=error_count)")
        lines.append(f"    return {', '.join(f'outs[{n!r}]' for n in spec.returned)},")
    else:
        lines.append(f"    if {shortcut}: (_k_cuda if {dev} else _k_cpu)({call}, error_count=error_count)")
        lines.append(f"    else: _packet({call}, error_count=error_count)")
        lines.append("    return None")
    env = {
        "_fast": getattr(_FAST, spec.name, None),
        "_dynamo_compiling": _dynamo_compiling,
        "_T": _Tensor, "_as_int": _arrays.as_int, "_as_str": _arrays.as_str, "_spec": spec, "_ALWAYS": _ALWAYS_DISPATCH,
        "_compiling": torch.compiler.is_compiling, "_dmodes": torch._C._len_torch_dispatch_stack,
        "_fmodes": torch._C._is_torch_function_mode_enabled, "_packet": getattr(torch.ops.dsv4kv, spec.name),
        "_k_cpu": _KERNELS[(spec.name, "", False)], "_k_cuda": _KERNELS[(spec.name, "", True)],
        "_ko_cpu": _KERNELS.get((spec.name, "out", False)), "_ko_cuda": _KERNELS.get((spec.name, "out", True)),
    }
    if not fast:
        allocate = bool(spec.returned)
        env.update(_k_cpu=_make_kernel(spec, False, allocate, fast=False),
                   _k_cuda=_make_kernel(spec, True, allocate, fast=False))
        if spec.returned:
            env.update(_ko_cpu=_make_kernel(spec, False, False, fast=False),
                       _ko_cuda=_make_kernel(spec, True, False, fast=False))
    exec(compile("\n".join(lines) + "\n", f"<dsv4kv route {spec.name}>", "exec"), env)
    return env["route"]


_ROUTES = {name: _make_route(spec) for name, spec in SPECS.items()}
# ops._run's hook: the generated route of each operation, by public function (see _make_route).
ops._torch_routes.update((spec.fn, _ROUTES[name]) for name, spec in SPECS.items())
