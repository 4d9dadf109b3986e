"""The README examples run as written (python/README.md, and the root README's Python section)."""

import re
import subprocess
import sys

import pytest

from _support import REPO


def python_blocks(path, section=None):
    text = path.read_text()
    if section is not None:
        m = re.search(rf"^## {section}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
        if not m:
            return []
        text = m.group(1)
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("readme,section", [("python/README.md", None), ("README.md", "Python")])
def test_readme_python_examples_run(readme, section, tmp_path):
    path = REPO / readme
    if not path.is_file():
        pytest.skip(f"{readme} not found")
    blocks = python_blocks(path, section)
    if not blocks:
        pytest.skip(f"{readme} has no Python example yet")
    first = blocks[0].strip().splitlines()
    assert len(first) == 5, "the example is five lines"
    for i, code in enumerate(blocks):
        if "import torch" in code and "torch" not in sys.modules:
            try:
                import torch  # noqa: F401
            except ImportError:
                continue
        script = tmp_path / f"example{i}.py"
        script.write_text(code)
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=str(tmp_path),
                           timeout=120)
        assert r.returncode == 0, f"{readme} example {i}:\n{code}\n{r.stderr}"
        if i == 0:
            # format_block: the report's columns line, then the line of each of the four tokens (no flags).
            lines = r.stdout.splitlines()
            assert lines[0].startswith("columns: ") and len(lines) == 5
            assert [line[:7] for line in lines[1:]] == [f"  {p:>4} " for p in range(4)]
            assert all(line.endswith("]") for line in lines[1:])
