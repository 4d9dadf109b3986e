"""Drop-in compatibility with vLLM's cache_utils (the seed): names, positional order, keyword
names and defaults, and a script written against vLLM that runs with only its import changed."""

import inspect
import os
import subprocess
import sys
import textwrap

import pytest

import dsv4kv
from op_cases import OPS

# Transcribed from the seed (vllm/models/deepseek_v4/common/ops/cache_utils.py): (name, default),
# one list per operation in op_cases/.
SEED = {m.NAME: m.SIGNATURE for m in OPS}
#: Keyword-only parameters of the seed (PR #42504's use_fnuz), where an operation has some.
SEED_KEYWORD_ONLY = {m.NAME: dict(getattr(m, "KEYWORD_ONLY", [])) for m in OPS}
#: Keyword-only additions, default None (bytes_per_token and max_gather_len: vLLM V4.1's spellings).
EXTRAS = {"error_count", "stream", "out", "replay_start", "bytes_per_token", "max_gather_len"}
#: The operations with a semantics profile: a keyword-only addition whose default is the seed's behaviour.
PROFILED = {m.NAME for m in OPS if getattr(m, "TAKES_SEMANTICS", False)}
#: The cache operations take a record: a keyword-only addition whose default is the seed's record.
RECORDED = {m.NAME for m in OPS if getattr(m, "TAKES_RECORD", False)}


@pytest.mark.parametrize("name", sorted(SEED))
def test_signature_matches_seed(name):
    params = list(inspect.signature(getattr(dsv4kv, name)).parameters.values())
    positional = [p for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert [(p.name, p.default) for p in positional] == SEED[name]
    extras = [p for p in params if p.kind != p.POSITIONAL_OR_KEYWORD]
    seed_kw = SEED_KEYWORD_ONLY[name]
    assert {p.name: p.default for p in extras if p.name in seed_kw} == seed_kw
    assert all(p.kind == p.KEYWORD_ONLY and (p.name in seed_kw or (p.name in EXTRAS and p.default is None)
                                             or (p.name == "semantics" and p.default == "seed")
                                             or (p.name == "record" and p.default == "fp8_ds_mla"))
               for p in extras)
    assert any(p.name == "semantics" for p in extras) == (name in PROFILED)
    assert any(p.name == "record" for p in extras) == (name in RECORDED)


@pytest.mark.parametrize("name", sorted(SEED))
def test_docstrings_give_shapes_and_dtypes(name):
    doc = getattr(dsv4kv, name).__doc__
    assert "int32" in doc and "[" in doc


# A script as a vLLM user writes it (each operation's part from op_cases/); the test swaps only
# its import line.
VLLM_SCRIPT = ("\nimport torch\nfrom vllm.models.deepseek_v4.common.ops.cache_utils import (\n    "
               + ", ".join(sorted(SEED)) + ")\n\n"
               + 'dev = "cuda" if torch.cuda.is_available() else "cpu"\ntorch.manual_seed(0)\n'
               + "\n".join(m.VLLM_SCRIPT for m in OPS) + 'print("ok", dev)\n')


def test_vllm_script_runs_with_only_the_import_changed(tmp_path):
    pytest.importorskip("torch", reason="the vLLM-style script uses torch tensors; torch is not installed")
    script = VLLM_SCRIPT.replace("from vllm.models.deepseek_v4.common.ops.cache_utils import", "from dsv4kv import")
    assert script.count("\n") == VLLM_SCRIPT.count("\n")
    changed = [a for a, b in zip(VLLM_SCRIPT.splitlines(), script.splitlines()) if a != b]
    assert len(changed) == 1
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=str(tmp_path), timeout=300,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok")
