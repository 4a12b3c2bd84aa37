"""The notebooks: stored clean, self-checking, and executed (each on its own LocalCluster).

``test_notebook_executes`` runs every notebook top to bottom in a fresh kernel (as
``pytest --nbmake notebooks`` does), so the plain ``python -m pytest`` covers them.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
EXPECTED = {"lasso", "lda", "matrix_factorization", "custom_program", "dask_pipeline"}


def _notebooks():
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def test_every_promised_notebook_is_there():
    assert {p.stem for p in _notebooks()} >= EXPECTED


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name} cell {i} has stored outputs"
            assert cell.execution_count is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.name)
def test_notebook_runs_on_its_own_local_cluster_and_closes_it(path):
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    # a private cluster on localhost, with two workers: no network, no default-client leaks
    assert re.search(r"LocalCluster\(n_workers=2", code)
    assert 'host="127.0.0.1"' in code or "processes=False" in code
    assert "client.close()" in code and "cluster.close()" in code
    # self-checking: each notebook asserts what it shows
    assert "assert" in code
    # no machine-specific paths
    assert "/work/" not in code and "/home/" not in code


@pytest.mark.slow
@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.name)
def test_notebook_executes(path, tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    # a fresh python3 kernel whose working directory is scratch space; a failing cell
    # (every notebook asserts its results) raises CellExecutionError with its traceback
    NotebookClient(nb, timeout=540, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
