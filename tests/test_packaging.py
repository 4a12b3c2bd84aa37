"""Packaging and CI wiring: the README's commands, .ci/run, pyproject and environment.yml agree,
and every module the package imports is a declared dependency."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
README = (REPO / "README.md").read_text()
CI_RUN = (REPO / ".ci" / "run").read_text()

# import name -> distribution name, where they differ
DIST_OF = {"sklearn": "scikit-learn", "dask_jobqueue": "dask-jobqueue", "yaml": "pyyaml"}


def _dist(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].strip().lower()


def _ci_test_command() -> str:
    match = re.search(r"^TEST_COMMAND='(.+)'$", CI_RUN, re.M)
    assert match, ".ci/run must define TEST_COMMAND='...'"
    return match.group(1)


def test_readme_shows_the_two_setup_commands_and_ci_runs_the_second():
    command = _ci_test_command()
    assert command == 'python -m pip install -e ".[test]" && python -m pytest'
    shown = re.findall(r"```bash\n(?:#[^\n]*\n)*([^\n]+)\n```", README)
    assert 'pip install -e ".[demo]" && python -m dask_strads demo' in shown
    assert command in shown, (command, shown)
    assert 'bash -c "$TEST_COMMAND"' in CI_RUN
    assert "ruff check dask_strads tests" in CI_RUN


def test_ci_scripts_are_valid_bash():
    bash = shutil.which("bash")
    assert bash is not None
    for script in [REPO / ".ci" / "run", *sorted((REPO / "ci" / "slurm").glob("*.sh"))]:
        proc = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, (script, proc.stderr)
    assert (REPO / ".ci" / "run").stat().st_mode & 0o111, ".ci/run must be executable"


def test_pyproject_declares_python_extras_and_pytest_settings():
    project = PYPROJECT["project"]
    assert project["requires-python"] == ">=3.11"
    extras = project["optional-dependencies"]
    assert {"test", "bench", "notebooks", "slurm", "plot", "demo"} <= set(extras)
    # the README's command 1 gives a first demo run with its plot and both references
    assert {"matplotlib", "lda"} <= {_dist(r) for r in extras["demo"]}
    bench = {_dist(r) for r in extras["bench"]}
    assert {"scikit-learn", "skglm", "celer", "lda", "tomotopy"} <= bench
    test = {_dist(r) for r in extras["test"]}
    assert {"pytest", "pytest-timeout", "hypothesis", "ruff", "lda", "dask-jobqueue"} <= test
    pytest_cfg = PYPROJECT["tool"]["pytest"]["ini_options"]
    assert pytest_cfg["testpaths"] == ["tests"]
    assert {m.split(":")[0] for m in pytest_cfg["markers"]} == {"slow", "slurm"}
    assert pytest_cfg["timeout"] > 0
    assert project["scripts"]["dask-strads"] == "dask_strads.cli:main"


def test_environment_yml_has_the_same_dependencies():
    yaml = pytest.importorskip("yaml")  # pyyaml comes with dask
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    assert "conda-forge" in env["channels"]
    names = set()
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            names |= {_dist(d) for d in dep.get("pip", [])}
        else:
            names.add(_dist(dep).replace("matplotlib-base", "matplotlib"))
    declared = {_dist(r) for r in PYPROJECT["project"]["dependencies"]}
    for extra in ("test", "slurm", "bench", "demo"):
        declared |= {_dist(r) for r in PYPROJECT["project"]["optional-dependencies"][extra]}
    assert declared - names == set(), f"missing from environment.yml: {declared - names}"


def _guards_import_error(node: ast.AST) -> bool:
    """``try: ... except ImportError`` or ``with contextlib.suppress(ImportError)``."""
    names = {"ImportError", "ModuleNotFoundError"}
    if isinstance(node, ast.Try):
        return any(h.type is None or names & {n.id for n in ast.walk(h.type)
                                              if isinstance(n, ast.Name)}
                   for h in node.handlers)
    if isinstance(node, ast.With):
        return any(isinstance(item.context_expr, ast.Call)
                   and names & {n.id for n in ast.walk(item.context_expr)
                                if isinstance(n, ast.Name)}
                   for item in node.items)
    return False


def _imported_modules(path: Path) -> set[str]:
    """Top-level modules imported by ``path``, except optional ones (guarded imports)."""
    found = set()

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.Import) and not guarded:
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif (isinstance(node, ast.ImportFrom) and not guarded and node.level == 0
              and node.module):
            found.add(node.module.split(".")[0])
        if isinstance(node, ast.Try) and _guards_import_error(node):
            for child in node.body:
                visit(child, True)
            for child in node.handlers + node.orelse + node.finalbody:
                visit(child, guarded)
            return
        inner = guarded or _guards_import_error(node)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(_parse(path), False)
    return found


def _parse(path):
    # CPython < 3.11.8 can raise a spurious "AST constructor recursion depth mismatch"
    # (gh-106905) after other code ran deep recursion in this thread; a retry parses
    for attempt in range(3):
        try:
            return ast.parse(path.read_text(), filename=str(path))
        except SystemError:
            if attempt == 2:
                raise


def test_every_import_of_the_package_is_a_declared_dependency():
    project = PYPROJECT["project"]
    required = {_dist(r) for r in project["dependencies"]}
    optional = {_dist(r) for extra in ("slurm", "plot") for r in
                project["optional-dependencies"][extra]}
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    undeclared = {}
    for path in sorted((REPO / "dask_strads").rglob("*.py")):
        for module in _imported_modules(path) - stdlib - {"dask_strads"}:
            dist = DIST_OF.get(module, module).lower().replace("_", "-")
            if dist not in required | optional:
                undeclared.setdefault(module, []).append(str(path.relative_to(REPO)))
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


WORKER_MODULES = ["dask_strads.engine.tasks", "dask_strads.engine.plugin",
                  "dask_strads.cd.program", "dask_strads.cd.finite",
                  "dask_strads.lda.program", "dask_strads.mf.program"]


def test_the_modules_a_worker_loads_do_not_import_client_side_libraries():
    # a worker imports what its tasks name: scikit-learn is slow to import (it would delay
    # every fresh worker's first fit), and pandas with pyarrow take memory on every
    # worker that a shard near the worker's memory limit needs
    code = ("import sys\n" + "".join(f"import {m}\n" for m in WORKER_MODULES)
            + "print(sorted(m for m in ('sklearn', 'matplotlib', 'pandas', 'pyarrow')"
              " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO)
    assert out.stdout.strip() == "[]", out.stdout
