"""The kernels' ``warm_up`` compiles what a fit's rounds run: after it, a small LDA fit
(each sampler) and a small MF fit compile no kernel (none of their rounds pays for
numba). Run in a fresh interpreter: in the test session other tests compile first."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = textwrap.dedent("""
    import json
    import numba
    from dask_strads.lda import kernels as lda_kernels
    from dask_strads.mf import kernels as mf_kernels
    from dask_strads.mf.program import MFProgram
    from dask_strads._datasets.lda import make_lda_corpus
    from tests.lda.test_program import _program, _shards as lda_shards, _simulate
    from tests.mf._reference import drive
    from tests.mf.test_program import _problem, _shards as mf_shards

    import pkgutil, importlib
    # the LDA kernels are a package: every module of it
    lda_modules = [importlib.import_module(f"{lda_kernels.__name__}.{info.name}")
                   for info in pkgutil.iter_modules(lda_kernels.__path__)]

    def compiled():
        return {f"{m.__name__}.{name}": len(f.signatures)
                for m in (*lda_modules, mf_kernels) for name, f in vars(m).items()
                if isinstance(f, numba.core.registry.CPUDispatcher)
                and f.__module__ == m.__name__}

    before = compiled()
    lda_kernels.warm_up()
    mf_kernels.warm_up()
    warm = compiled()
    X, _ = make_lda_corpus(120, 80, 4, doc_length=30, random_state=1)
    for sampler in ("sparse", "mh", "gibbs"):
        data, _ = lda_shards(X, 2)
        _simulate(_program(X, 2, K=4, max_iter=3, sampler=sampler), data)
    ratings, A = _problem(2, m=80, n=60, nnz=1500)
    drive(MFProgram(3, 0.05, 2, 0.0, inner_iter=2, init=("random", 3, 0.3)),
          mf_shards(A, 2, ratings.test))
    print(json.dumps({"before": before, "warm": warm, "after": compiled()}))
""")


def test_after_warm_up_the_rounds_of_a_fit_compile_nothing():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not any(seen["before"].values())  # a fresh interpreter
    assert any(seen["warm"].values())
    grew = {k: (seen["warm"][k], n) for k, n in seen["after"].items() if n != seen["warm"][k]}
    assert not grew, f"compiled during the fits, after warm_up (before, after): {grew}"
