"""The README as a new user reads it: the Quick start runs pasted into a script, and the
headline benchmark table is the one ``bench/results/`` gives."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def _section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _quick_start() -> str:
    return re.search(r"```python\n(.+?)```", _section("Quick start"), re.S).group(1)


def _headline():
    spec = importlib.util.spec_from_file_location("headline", REPO / "bench" / "headline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_start_guards_the_cluster_for_scripts():
    code = _quick_start()
    assert 'if __name__ == "__main__":' in code
    guarded = code.split('if __name__ == "__main__":', 1)[1]
    assert "LocalCluster(" in guarded and ".fit(" in guarded
    compile(code, "quick_start.py", "exec")


@pytest.mark.slow
def test_quick_start_runs_as_a_script(tmp_path):
    script = tmp_path / "quick_start.py"
    script.write_text(_quick_start())
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("NUMBA_CACHE_DIR", str(REPO / ".numba_cache"))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bootstrapping phase" not in proc.stderr
    rmse = float(proc.stdout.split()[-1])  # the held-out RMSE printed last
    assert 0 < rmse < 0.5, proc.stdout[-2000:]


def test_headline_table_is_generated_from_the_results():
    headline = _headline()
    assert headline.readme_block(README) == headline.render(), \
        "README.md's headline table is stale: python bench/headline.py --write"
    table = headline.render()
    for peer in ("scikit-learn", "skglm", "celer", "tomotopy", "lda", "ALS"):
        assert peer in table
    assert "python bench/lasso.py" in table and "2-core" in table
    assert "headline:start" in _section("Benchmarks")


def test_readme_says_what_the_commands_cost():
    setup = _section("Set-up")
    assert re.search(r"first run compiles the numba kernels", setup)
    assert re.search(r"Command 2 runs about \d+ tests, about \d+ minutes", setup)
    assert "DEMO_" not in setup  # placeholders filled in
