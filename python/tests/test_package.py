"""Package surface: `from dsv4kv import *` brings functions only, the build says which backends
it has, and the extension's operations are the operation table's (one generic binder)."""

import inspect as std_inspect
import subprocess
import sys

import dsv4kv
from dsv4kv import _ext


def test_star_import_exports_functions_only():
    assert dsv4kv.__all__, "__all__ is empty"
    for name in dsv4kv.__all__:
        assert std_inspect.isfunction(getattr(dsv4kv, name)), f"__all__ exports non-function {name}"
    # the standard inspect module survives a star import
    code = "import inspect\nfrom dsv4kv import *\nprint(inspect.__name__, inspect.isfunction)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "inspect"


def test_backends_attribute_matches_the_build():
    assert dsv4kv.backends[0] == "reference"
    assert ("cuda" in dsv4kv.backends) == bool(_ext.has_cuda) == dsv4kv.HAS_CUDA
    assert set(dsv4kv.backends) <= {"reference", "cuda"}


def test_every_table_operation_is_bound_and_public():
    assert len(_ext.ops) >= 5
    for name, fields in _ext.ops.items():
        assert callable(getattr(_ext, name)), name
        assert callable(getattr(dsv4kv, name)), f"dsv4kv.{name} (the public wrapper) is missing"
        assert name in dsv4kv.__all__
        assert fields[-1] == ("error_count", "counter", "counter"), f"{name}: error_count must be last"
        roles = {role for _, role, _ in fields}
        assert roles <= {"in", "out", "inout", "scalar", "counter"}


def test_generic_binding_checks_its_arity():
    import pytest

    name, fields = next(iter(_ext.ops.items()))
    with pytest.raises(TypeError, match=f"takes {len(fields) + 1} positional arguments"):
        getattr(_ext, name)(None)
