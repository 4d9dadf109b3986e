"""What each operation's Python function means to the generic plumbing, derived once from
the extension's operation table (``_ext.ops``: the C++ argument struct's members as
(name, role, kind), in order) and the public function's signature (dsv4kv/ops.py).

Nothing here names an operation except the output-shape rules of the operations that
allocate their outputs (``@output_shapes``), which are part of each operation's semantics.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _arrays, _ext

#: op name -> function(values) -> one shape per allocated output (in `returned` order).
_SHAPES: Dict[str, Callable[[Dict[str, Any]], List[tuple]]] = {}


def output_shapes(name: str):
    """Registers the shapes of the outputs operation `name` allocates when out= is None."""

    def register(fn):
        _SHAPES[name] = fn
        return fn

    return register


def dims(x: Any) -> Optional[tuple]:
    """The shape of an array-like without forcing symbolic sizes (torch.compile) to ints;
    None when it has none."""
    if _arrays.is_torch(x):
        return tuple(x.shape)
    return _arrays.shape_of(x)


class OpSpec:
    """One operation as the generic plumbing sees it.

    Attributes:
        name: the operation (C++ function, _ext binding, Python function, torch op).
        fields: ``_ext.ops[name]``: (name, role, kind) per member of the argument struct.
        params: the public function's positional parameters (vLLM's order).
        kwparams: its keyword-only parameters that are fields (error_count aside).
        returned: output fields the function allocates and returns (not among its parameters).
        array_fields: fields passed as arrays (tensors and the error counter), in field order.
        optional: array parameters that accept None.
        like: the first required array parameter (outputs are allocated next to it).
    """

    def __init__(self, fn: Callable):
        self.name = fn.__name__
        self.fn = fn
        self.fields: Tuple[Tuple[str, str, str], ...] = tuple(_ext.ops[self.name])
        sig = inspect.signature(fn)
        self.signature = sig
        self.kinds = {name: kind for name, _, kind in self.fields}
        self.params = [p for p in sig.parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD]
        #: keyword-only parameters that are fields (other than error_count), e.g. a use_fnuz
        #: that a function takes after `*`; the torch schema keeps them keyword-only.
        self.kwparams = [p for p in sig.parameters.values()
                         if p.kind == p.KEYWORD_ONLY and self.kinds.get(p.name, "counter") != "counter"]
        names = {p.name for p in self.params + self.kwparams}
        self.roles = {name: role for name, role, _ in self.fields}
        self.returned = [name for name, role, _ in self.fields if role == "out" and name not in names]
        self.array_fields = [name for name, _, kind in self.fields if kind in ("tensor", "counter")]
        self.optional = {
            p.name
            for p in self.params + self.kwparams
            if p.default is None or str(p.annotation).startswith("Optional")
        }
        required = [p.name for p in self.params if self.kinds.get(p.name) == "tensor" and p.name not in self.optional]
        self.like = required[0]
        for name in self.kinds:
            if name not in names and name not in self.returned and self.kinds[name] != "counter":
                raise TypeError(f"dsv4kv: {self.name}'s Python signature has no parameter for field {name!r}")
        if self.returned and self.name not in _SHAPES:
            raise TypeError(f"dsv4kv: {self.name} returns {self.returned} but no @output_shapes rule is registered")

    def scalar(self, name: str, value: Any) -> Any:
        """A scalar argument normalized as the extension and the torch schema take it (an
        integer through operator.index with the contract's TypeError, a str as it is, a bool by truth)."""
        kind = self.kinds[name]
        if kind == "int":
            return _arrays.as_int(self.name, name, value)
        if kind == "int?":
            return None if value is None else _arrays.as_int(self.name, name, value)
        if kind == "str":
            return _arrays.as_str(self.name, name, value)
        return bool(value)

    def shapes(self, values: Dict[str, Any]) -> List[tuple]:
        """Shapes of the outputs allocated for `values` (the call's arguments)."""
        return _SHAPES[self.name](values)

    def outputs(self, values: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """The returned outputs of this call: the caller's ``out=`` tuple, or new int32 arrays
        next to `like` from its framework; None for an operation that returns nothing."""
        if not self.returned:
            return None
        out = values.get("out")
        if out is not None:
            try:
                arrays = tuple(out)
            except TypeError:
                arrays = ()
            if len(arrays) != len(self.returned):
                raise TypeError(f"{self.name}: out must be a pair (indices, lens) of int32 arrays")
            return dict(zip(self.returned, arrays))
        like = values.get(self.like)
        if like is None:
            # Nothing to allocate next to: the contract's own wording for a missing argument
            # (spec/contracts.md, "<name> is required"), as the extension reports it for the others.
            raise ValueError(f"{self.name}: {self.like} is required")
        return {name: _arrays.alloc_int32(self.name, like, shape) for name, shape in zip(self.returned, self.shapes(values))}


_SPECS: Dict[Callable, OpSpec] = {}


def spec(fn: Callable) -> OpSpec:
    """The OpSpec of public function `fn` (built on first use)."""
    s = _SPECS.get(fn)
    if s is None:
        s = _SPECS[fn] = OpSpec(fn)
    return s
