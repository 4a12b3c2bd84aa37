"""The fault soak (bench/soak.py, issue 40) in short: one fit of the engine's proof program
per fault kind, each disturbed at a random moment of the fit; every fit must complete
and equal the undisturbed one. The full soak (every model, N fits per fault) is
``python bench/soak.py --n 50``; its table is bench/results/soak.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_short_soak_every_fit_completes_equal(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "soak.py"), "--n", "1", "--models", "lstsq",
         "--faults", "kill1,kill2,kill_rec,retire", "--seed", "1",
         "--results", str(tmp_path), "--out", "short"],
        env=env, capture_output=True, text=True, timeout=300)
    records = json.loads((tmp_path / "short.json").read_text())
    assert [r["fault"] for r in records] == ["kill1", "kill2", "kill_rec", "retire"]
    bad = [(r["fault"], r["status"], r["error"]) for r in records if r["status"] != "equal"]
    assert not bad, (bad, proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "| lstsq | kill1 | 1 | 1 | 1 |" in (tmp_path / "short.md").read_text()
