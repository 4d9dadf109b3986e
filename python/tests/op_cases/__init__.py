"""One module per operation: the samples and builders the generic tests iterate over.

Each module names its operation (``NAME``) and gives, where a generic test needs one:
``SIGNATURE`` (the seed's positional parameters and defaults; ``KEYWORD_ONLY`` its keyword-only
ones, if any), ``REQUIRED`` and
``valid_call(xp)`` (a valid call and its required arrays), ``GOLDEN`` (golden file -> runner),
``problem``/``preallocated``/``run`` (its part of the random problem), ``sample`` (its
torch.ops.dsv4kv opcheck arguments), ``small_problem`` (bench/host_cost.py's host-cost input),
and lists of operation-specific test functions (``ERROR_TESTS``, ``ORACLE_TESTS``,
``PROPERTY_TESTS``, ``TORCH_TESTS``) that the
matching generic test module adopts. A new operation adds one module here.
"""

import importlib
import pkgutil

import dsv4kv

_ORDER = {name: i for i, name in enumerate(dsv4kv.__all__)}

#: The modules, in the operation table's order (the order of dsv4kv.__all__).
OPS = sorted((importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)),
             key=lambda m: _ORDER[m.NAME])
BY_NAME = {m.NAME: m for m in OPS}


def adopt(namespace, attr):
    """Puts every module's test functions listed in `attr` into `namespace` (a test module's
    globals()), so pytest collects them there, next to the generic tests of the same kind."""
    for m in OPS:
        for f in getattr(m, attr, ()):
            assert f.__name__ not in namespace, f.__name__
            namespace[f.__name__] = f
