"""pytest configuration: report which dsv4kv build and which frameworks the run uses; the ``xp``
fixture (NumPy, torch CPU, torch CUDA) of the upstream-test ports."""

import pytest

import dsv4kv
from _support import NumpyXP, TorchXP, skip_without_cuda


def pytest_report_header(config):
    ok, why = dsv4kv.cuda_available()
    lines = [f"dsv4kv {dsv4kv.__version__} from {dsv4kv.__file__}",
             f"dsv4kv CUDA backend: {'built' if dsv4kv.HAS_CUDA else 'not built'}; "
             f"device: {'available' if ok else 'unavailable (' + why + ')'}"]
    try:
        import torch

        lines.append(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}")
    except ImportError:
        lines.append("torch: not installed (torch tests skipped)")
    return lines


def _have_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(params=["numpy", "torch-cpu", "torch-cuda"])
def xp(request):
    """The _support array adapter (from_np / to_np / synchronize) of one framework and device.
    torch CPU skips without torch; torch CUDA skips with the reason (no torch, no device, no CUDA
    backend) and fails instead when DSV4KV_REQUIRE_CUDA=1. (test_errors.py has its own.)"""
    name = request.param
    if name == "numpy":
        return NumpyXP()
    if name == "torch-cpu":
        if not _have_torch():
            pytest.skip("torch is not installed")
        return TorchXP("cpu")
    skip_without_cuda()
    return TorchXP("cuda")
