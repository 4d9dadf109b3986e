"""pytest configuration: report which dsv4kv build and which frameworks the run uses."""

import dsv4kv


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
